"""Issue 16: what reflowed text does for quoting, measured before and after in one run.

Two servers on the embedded model, the same machine and settings, one with the old text rules
(``DOCQA_DEBUG_TEXT_RULES=1``: the raw extracted lines) and one with the new (``2``: paragraphs reflowed,
hyphens joined, page furniture dropped). On three inputs each answers a copy-this-passage question
with the default (adaptive) draft window and with ``draft_tokens: 0``, ``--runs`` times (median):

* Alice: the first 24,000 characters of the Gutenberg text (hard-wrapped at ~70 characters), the
  issue's question about the paragraph "There was nothing so VERY remarkable in that";
* a multi-page PDF with hyphenation: ../shared/cases multicolumn.pdf (3 pages, two columns), asked
  what it says (asked for a paragraph, the base model answers nothing on one of the two texts);
* a Markdown file: the opening of *Around the World in Eighty Days* as Markdown hard-wrapped at 72
  columns (tests/ingest/files/around-the-world-opening.md; this project's README, full of code and
  tables, only makes the 270M base model babble).

Also: prefill tokens of each document before and after, and the extraction time per page of each
new format on the sample files in tests/ingest/files (a DOCX or HTML file is one page, an EPUB
one page per chapter).

Usage: .venv/bin/python -m bench.reflow [--threads N] [--runs 3] [--out bench/results/reflow.json]
Writes the .json and a .md table next to it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fastapi.testclient import TestClient

from ingest.extract import extract
from runtime.embedded import embedded_model_path
from server.api.app import create_app
from server.config.settings import Settings
from testkit.live import LOCAL

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT.parent / "shared/cases"
FILES = ROOT / "tests/ingest/files"
INPUTS = {
    "alice": (
        "alice.txt",
        lambda: (CASES / "text/gutenberg/alice-in-wonderland-pg11.txt").read_bytes().decode("utf-8-sig")[:24_000],
        "Copy, word for word, the paragraph that begins with 'There was nothing so VERY remarkable in that'",
        200,
    ),
    "pdf": (
        "multicolumn.pdf",
        lambda: (CASES / "pdf/sample-files/026-latex-multicolumn/multicolumn.pdf").read_bytes(),
        "What does the document say? Quote it.",
        200,
    ),
    "markdown": (
        "around-the-world-opening.md",
        lambda: (FILES / "around-the-world-opening.md").read_bytes(),
        "Repeat the document from the beginning, word for word.",
        200,
    ),
}
MODES = {"default": {}, "draft_tokens_0": {"draft_tokens": 0}}
SAMPLES = (
    FILES / "alice-ch1.docx",
    FILES / "settings-table.docx",
    FILES / "alice-ch1-2.epub",
    FILES / "rustdoc-how-to-write-documentation.html",
    FILES / "around-the-world-opening.md",
    CASES / "pdf/sample-files/026-latex-multicolumn/multicolumn.pdf",  # for comparison
)


def _machine() -> dict:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if "model name" in line
        ),
        platform.processor() or platform.machine(),
    )
    system = subprocess.run([sys.executable, "-m", "runtime.system"], capture_output=True, text=True, cwd=ROOT)
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "system": system.stdout.strip(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def _ingest(client: TestClient, name: str, data: bytes) -> dict:
    r = client.post("/v1/documents", files={"file": (name, data)})
    r.raise_for_status()
    t0 = time.perf_counter()
    while (doc := client.get(f"/v1/documents/{r.json()['id']}").json())["status"] == "ingesting":
        time.sleep(0.05)
    assert doc["status"] == "ready", doc
    doc["ingest_s"] = round(time.perf_counter() - t0, 2)
    return doc


def _ask(client: TestClient, doc_id: str, question: str, max_tokens: int, body: dict) -> dict:
    r = client.post(f"/v1/documents/{doc_id}/answers", json={"question": question, "max_tokens": max_tokens, **body})
    r.raise_for_status()
    return r.json()


def _summary(answers: list[dict]) -> dict:
    stats = [a["stats"] for a in answers]
    return {
        "decode_tokens_per_s": round(statistics.median(s["decode_tokens_per_s"] for s in stats), 1),
        "mean_accepted_per_step": round(statistics.median(s["mean_accepted_per_step"] for s in stats), 2),
        "completion_tokens": stats[0]["completion_tokens"],
        "verify_steps": stats[0]["verify_steps"],
        "answer_start": answers[0]["answer"][:100],
    }


def _extraction_per_page(runs: int) -> dict:
    out = {}
    for path in SAMPLES:
        data = path.read_bytes()
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            result = extract(data)
            times.append(time.perf_counter() - t0)
        out[path.name] = {
            "kind": result.kind,
            "bytes": len(data),
            "pages": result.pages,
            "chars": len(result.text),
            "ms_per_page": round(1000 * statistics.median(times) / result.pages, 1),
            "ms_per_10k_chars": round(1000 * statistics.median(times) / len(result.text) * 10_000, 1),
        }
    return out


def _markdown(results: dict) -> str:
    lines = [
        "# Reflowed text (issue 16): before and after, one run",
        "",
        f"CPU: {results['machine']['cpu']}, {results['machine']['cores']} cores, Python {results['machine']['python']};"
        f" embedded model, {results['threads']} threads, median of {results['runs']} runs. `python -m bench.reflow`."
        f" Load average (1/5/15 min) at start {results['machine']['load_average_at_start']},"
        f" at end {results['machine']['load_average_at_end']}; the two arms' requests are interleaved.",
        "",
        "```",
        results["machine"]["system"],
        "```",
        "",
        "| input | rules | prefill tokens | accepted/step default | accepted/step draft 0 | tok/s default "
        "| tok/s draft 0 | default / draft 0 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, per_rules in results["inputs"].items():
        for rules, r in per_rules.items():
            lines.append(
                f"| {name} | {rules} | {r['tokens']:,} | {r['default']['mean_accepted_per_step']} | "
                f"{r['draft_tokens_0']['mean_accepted_per_step']} | {r['default']['decode_tokens_per_s']} | "
                f"{r['draft_tokens_0']['decode_tokens_per_s']} | **{r['speedup_default_over_draft_0']}x** |"
            )
    lines += [
        "",
        "| sample file | kind | bytes | pages | chars | extraction ms/page | ms per 10k chars |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, e in results["extraction"].items():
        lines.append(
            f"| {name} | {e['kind']} | {e['bytes']:,} | {e['pages']} | {e['chars']:,} | {e['ms_per_page']} "
            f"| {e['ms_per_10k_chars']} |"
        )
    lines += ["", "Answer starts (default mode):", ""]
    for name, per_rules in results["inputs"].items():
        for rules, r in per_rules.items():
            lines.append(f"- {name}, {rules}: `{r['default']['answer_start']!r}`")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/reflow.json")
    args = parser.parse_args()

    results: dict = {"machine": _machine(), "threads": args.threads, "runs": args.runs, "inputs": {}}
    results["extraction"] = _extraction_per_page(args.runs)
    model_path = embedded_model_path(Path(tempfile.mkdtemp(prefix="docqa-bench-model-")))
    labels = {1: "before", 2: "after"}
    with contextlib.ExitStack() as stack:
        # Both servers at once, their requests interleaved, so that other load on the machine falls
        # on both arms alike.
        clients = {}
        for rules, label in labels.items():
            data_dir = Path(tempfile.mkdtemp(prefix=f"docqa-bench-reflow-{rules}-"))
            settings = Settings(
                data_dir=data_dir, model_path=model_path, n_threads=args.threads, n_ctx=16384, debug_text_rules=rules
            )
            clients[label] = stack.enter_context(TestClient(create_app(settings), base_url=LOCAL))
        for name, (filename, load, question, max_tokens) in INPUTS.items():
            data = load()
            data = data.encode() if isinstance(data, str) else data
            docs = {label: _ingest(client, filename, data) for label, client in clients.items()}
            answers: dict = {(label, mode): [] for label in clients for mode in MODES}
            for _ in range(args.runs):
                for mode, body in MODES.items():
                    for label, client in clients.items():
                        answers[label, mode].append(_ask(client, docs[label]["id"], question, max_tokens, body))
            for label in clients:
                r = {"tokens": docs[label]["tokens"], "ingest_s": docs[label]["ingest_s"]}
                r |= {mode: _summary(answers[label, mode]) for mode in MODES}
                r["speedup_default_over_draft_0"] = round(
                    r["default"]["decode_tokens_per_s"] / r["draft_tokens_0"]["decode_tokens_per_s"], 2
                )
                results["inputs"].setdefault(name, {})[label] = r
                print(name, label, json.dumps(r, ensure_ascii=False), flush=True)
    results["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    args.out.with_suffix(".md").write_text(_markdown(results))
    print(_markdown(results))


if __name__ == "__main__":
    main()
