"""docqa against plain llama-cpp-python and llama.cpp's llama-server, same model, threads and
documents, in one run. Writes bench/results/bench.{md,json,png}.

Workloads (prompts chosen for a base model, which copies well and follows instructions poorly):
(a) re-read: answers that copy document text; (b) extractive: short factual questions;
(c) open: text not in the document, sampled at T=0.8 with a fixed seed (a base model loops on
greedy open prompts, and n-gram drafts would then be accepted anyway); (d) repeated: 5 questions
on one document (TTFT of the first and later ones). Every answer has a fixed length (no stop strings).

Run `bash bench/setup.sh` first (builds llama-server and llama-bench), then
`.venv/bin/python -m bench.run` (about 25 minutes on 2 cores; `--quick` for a smoke run).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.systems import DocqaServer, LlamaServer, PlainLlamaCppPython, Result  # noqa: E402
from ingest.prompt import plain_layout  # noqa: E402
from runtime.embedded import embedded_model_path  # noqa: E402

CASES = ROOT.parent / "shared/cases/text/gutenberg"
BIN = ROOT / "bench/.build/bin"
RESULTS = ROOT / "bench/results"

DOCS = {  # name: (file, characters) -> ~8k and ~23k prefix tokens with the embedded tokenizer
    "alice8k": ("alice-in-wonderland-pg11.txt", 31_000),
    "world23k": ("around-the-world-in-80-days-pg103.txt", 100_000),
}
WORKLOADS = {
    "reread": dict(
        n=128,
        temperature=0.0,
        prompts=[
            "Repeat the document from the beginning, word for word.",
            "Quote the first chapter of the document verbatim.",
        ],
    ),
    "extractive": dict(
        n=32,
        temperature=0.0,
        prompts=[
            "Who is the main character of the document?",
            "What is the title of the first chapter?",
            "Where does the story begin?",
        ],
    ),
    "open": dict(
        n=128,
        temperature=0.8,
        prompts=[
            "Write a recipe for a chocolate cake.",
            "Describe how a jet engine works.",
        ],
    ),
}
REPEATED = [
    "Who is the main character?",
    "What happens first?",
    "Name a place in the story.",
    "What is the weather like?",
    "How does the first chapter end?",
]
DOCQA_MODES = {"window1": {"draft_tokens": 0}, "default": {}, "verify16": {"verify16": True}}
SEED = 7


def prompt_text(document: str, question: str) -> str:
    layout = plain_layout(add_bos=False)  # llama-server and Llama add BOS themselves
    return layout.head + document + layout.between + question + layout.tail


def summarize(results: list[Result]) -> dict:
    drafted = sum(r.drafted for r in results)
    return {
        "decode_tps": round(statistics.median(r.decode_tps for r in results), 1),
        "ttft_ms": round(statistics.median(r.ttft_ms for r in results), 1),
        "acceptance": round(sum(r.accepted for r in results) / drafted, 3) if drafted else None,
        "drafted": drafted,
        "accepted": sum(r.accepted for r in results),
    }


def run_workloads(ask, runs: int, workloads: dict) -> dict:
    out = {}
    for name, w in workloads.items():
        results = [ask(p, w["n"], w["temperature"]) for _ in range(runs) for p in w["prompts"]]
        out[name] = summarize(results)
    return out


def bench_docqa(model: Path, threads: int, texts: dict, runs: int, workloads: dict) -> dict:
    data = Path(tempfile.mkdtemp(prefix="docqa-bench-"))
    server = DocqaServer(model, threads, data / "data")
    server.start()
    out: dict = {}
    try:
        for doc, text in texts.items():
            doc_id, seconds, tokens = server.ingest(f"{doc}.txt", text)
            out[doc] = {"ingest_s": round(seconds, 2), "tokens": tokens, "ingest_tps": round(tokens / seconds, 1)}
            for mode, body in DOCQA_MODES.items():

                def ask(q, n, t, body=body, doc_id=doc_id):
                    return server.ask(doc_id, q, n, t, SEED, body)

                out[doc][mode] = run_workloads(ask, runs, workloads)
            ttfts = [server.ask(doc_id, q, 8, 0.0, SEED, {}).ttft_ms for q in REPEATED]
            out[doc]["repeated_ttft_ms"] = {
                "first": round(ttfts[0], 1),
                "later": round(statistics.median(ttfts[1:]), 1),
            }
        server.stop()
        server.start()  # a restart: document states come back from disk
        for doc in texts:
            doc_id = next(iter(_list_ids(server, doc)))
            out[doc]["restart_ttft_ms"] = round(server.ask(doc_id, REPEATED[0], 8, 0.0, SEED, {}).ttft_ms, 1)
    finally:
        server.stop()
    return out


def _list_ids(server: DocqaServer, doc: str):
    import http.client

    c = http.client.HTTPConnection("127.0.0.1", server.port)
    c.request("GET", "/v1/documents")
    return [d["id"] for d in json.loads(c.getresponse().read())["documents"] if d["name"] == f"{doc}.txt"]


def bench_llama_server(model: Path, threads: int, texts: dict, runs: int, workloads: dict, quick: bool) -> dict:
    log = Path(tempfile.mkdtemp()) / "llama-server.log"
    configs = {"no_spec": []}
    grid = [("ngram-simple", 8), ("ngram-simple", 16), ("ngram-map-k", 8), ("ngram-map-k", 16), ("ngram-mod", 16)]
    if quick:
        grid = grid[:2]
    for spec_type, n_max in grid:
        extra = ["--spec-type", spec_type, "--spec-draft-n-max", str(n_max)]
        if spec_type == "ngram-simple":
            extra += ["--spec-ngram-simple-size-n", "3"]
        configs[f"{spec_type}/{n_max}"] = extra
    out: dict = {"configs": {}}
    first_doc, first_text = next(iter(texts.items()))
    # Pick the best n-gram configuration on the re-read workload of the first document.
    for name, extra in configs.items():
        server = LlamaServer(BIN / "llama-server", model, threads, spec=extra)
        server.start(log)
        try:
            w = WORKLOADS["reread"]
            res = [server.ask(prompt_text(first_text, p), w["n"], 0.0, SEED) for p in w["prompts"]]
            out["configs"][name] = summarize(res)
        finally:
            server.stop()
    best = max((n for n in configs if n != "no_spec"), key=lambda n: out["configs"][n]["decode_tps"])
    out["best_ngram"] = best
    for label, name in (("no_spec", "no_spec"), ("best_ngram", best)):
        server = LlamaServer(BIN / "llama-server", model, threads, spec=configs[name])
        server.start(log)
        try:
            for doc, text in texts.items():

                def ask(q, n, t, text=text, server=server):
                    return server.ask(prompt_text(text, q), n, t, SEED)

                d = out.setdefault(doc, {})
                d[label] = run_workloads(ask, runs, workloads)
                if label == "no_spec":
                    ttfts = [ask(q, 8, 0.0).ttft_ms for q in REPEATED]  # prompt cache warm after the first
                    d["repeated_ttft_ms"] = {
                        "first": round(ttfts[0], 1),
                        "later": round(statistics.median(ttfts[1:]), 1),
                    }
        finally:
            server.stop()
    return out


def bench_plain(model: Path, threads: int, texts: dict, runs: int, workloads: dict) -> dict:
    llm = PlainLlamaCppPython(model, threads)
    out: dict = {}
    try:
        for doc, text in texts.items():
            llm.reset()
            cold = llm.ask(prompt_text(text, REPEATED[0]), 8, 0.0, SEED)  # prefill + first token, nothing cached
            out[doc] = {"cold_ttft_ms": round(cold.ttft_ms, 1)}
            out[doc]["window1"] = run_workloads(
                lambda q, n, t, text=text: llm.ask(prompt_text(text, q), n, t, SEED), runs, workloads
            )
    finally:
        llm.close()
    return out


def llama_bench_pp(model: Path, threads: int, n_prompt: int) -> dict:
    out = {}
    for fa in ("1", "0"):
        proc = subprocess.run(
            [
                str(BIN / "llama-bench"),
                "-m",
                str(model),
                "-p",
                str(n_prompt),
                "-n",
                "0",
                "-t",
                str(threads),
                "-fa",
                fa,
                "-r",
                "1",
                "-o",
                "json",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        out[f"fa{fa}"] = round(json.loads(proc.stdout)[0]["avg_ts"], 1)
    return out


def python_share(model: Path, threads: int, text: str) -> dict:
    """Fraction of each decode step's wall time spent outside llama_decode, measured by wrapping
    the ctypes call, for window 1 and verify16 on the re-read prompt."""
    import numpy as np
    from llama_cpp import llama_cpp as C

    from runtime.llama import Model
    from testkit.harness import Prompt, open_ctx, prompt_tokens, speculative

    m = Model(model)
    ctx = open_ctx(m, n_ctx=32768, n_threads=threads, n_threads_batch=threads)
    prompt = Prompt(ctx, *prompt_tokens(m, text, WORKLOADS["reread"]["prompts"][0]))
    original = C.llama_decode
    spent = [0.0]

    def timed(c, batch):
        t0 = time.perf_counter()
        rc = original(c, batch)
        spent[0] += time.perf_counter() - t0
        return rc

    out = {}
    C.llama_decode = timed
    try:
        for label, window in (("window1", 0), ("verify16", 16), ("default", None)):
            prompt.start(ctx)
            spent[0] = 0.0
            t0 = time.perf_counter()
            speculative(ctx, prompt, 128, window)
            total = time.perf_counter() - t0
            out[label] = round(1 - spent[0] / total, 3)
    finally:
        C.llama_decode = original
        ctx.close()
        m.close()
    _ = np
    return out


def ratios(r: dict, first_doc: str) -> dict:
    d, ls, pl = r["docqa"], r["llama_server"], r["plain"]
    out = {}
    for doc in d:
        dd = d[doc]
        out[doc] = {
            "reread_default_over_window1": round(
                dd["default"]["reread"]["decode_tps"] / dd["window1"]["reread"]["decode_tps"], 2
            ),
            "reread_verify16_over_window1": round(
                dd["verify16"]["reread"]["decode_tps"] / dd["window1"]["reread"]["decode_tps"], 2
            ),
            "open_default_over_window1": round(
                dd["default"]["open"]["decode_tps"] / dd["window1"]["open"]["decode_tps"], 2
            ),
            "reread_default_over_llama_server_best_ngram": round(
                dd["default"]["reread"]["decode_tps"] / ls[doc]["best_ngram"]["reread"]["decode_tps"], 2
            ),
            "ttft_ram_over_cold": round(dd["repeated_ttft_ms"]["later"] / pl[doc]["cold_ttft_ms"], 4),
            "ttft_restart_over_cold": round(dd["restart_ttft_ms"] / pl[doc]["cold_ttft_ms"], 4),
            "ttft_ram_over_llama_server_warm": round(
                dd["repeated_ttft_ms"]["later"] / ls[doc]["repeated_ttft_ms"]["later"], 2
            ),
        }
    if "llama_bench_pp" in r:
        first = d[first_doc]
        out[first_doc]["ingest_over_llama_bench_pp"] = round(first["ingest_tps"] / max(r["llama_bench_pp"].values()), 2)
    return out


def write_markdown(r: dict, path: Path) -> None:
    lines = [
        f"# docqa benchmark ({r['machine']['when']})",
        "",
        f"Model: {r['machine']['model']}; {r['machine']['threads']} threads; {r['machine']['cpu']}.",
        "",
    ]
    for doc in r["docqa"]:
        lines += [
            f"## {doc} ({r['docqa'][doc]['tokens']} prefix tokens)",
            "",
            "| system | re-read tok/s | extractive tok/s | open tok/s | re-read acceptance |",
            "|---|---|---|---|---|",
        ]
        rows = [(f"docqa {m}", r["docqa"][doc][m]) for m in DOCQA_MODES]
        rows += [
            ("llama-cpp-python (plain)", r["plain"][doc]["window1"]),
            ("llama-server (no spec)", r["llama_server"][doc]["no_spec"]),
            (f"llama-server ({r['llama_server']['best_ngram']})", r["llama_server"][doc]["best_ngram"]),
        ]
        for name, w in rows:
            acc = w["reread"]["acceptance"]
            lines.append(
                f"| {name} | {w['reread']['decode_tps']} | {w['extractive']['decode_tps']} | "
                f"{w['open']['decode_tps']} | {acc if acc is not None else '–'} |"
            )
        dd = r["docqa"][doc]
        ls_ttft = r["llama_server"][doc]["repeated_ttft_ms"]
        lines += [
            "",
            "| TTFT (ms) | value |",
            "|---|---|",
            f"| plain llama-cpp-python, cold (prefill + first token) | {r['plain'][doc]['cold_ttft_ms']} |",
            f"| docqa, first question after ingest | {dd['repeated_ttft_ms']['first']} |",
            f"| docqa, later questions (state in RAM) | {dd['repeated_ttft_ms']['later']} |",
            f"| docqa, after a restart (state from disk) | {dd['restart_ttft_ms']} |",
            f"| llama-server, first question | {ls_ttft['first']} |",
            f"| llama-server, later questions (prompt cache warm) | {ls_ttft['later']} |",
            "",
            f"docqa ingest: {dd['ingest_tps']} tok/s ({dd['ingest_s']} s).",
            "",
        ]
    if "llama_bench_pp" in r:
        lines += [f"llama-bench pp at the first document's length: {r['llama_bench_pp']} tok/s.", ""]
    lines += [
        "## Ratios",
        "",
        "```json",
        json.dumps(r["ratios"], indent=1),
        "```",
        "",
        f"Python share of decode wall time: {r.get('python_share')}",
        "",
    ]
    path.write_text("\n".join(lines))


def plot(r: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    docs = list(r["docqa"])
    fig, axes = plt.subplots(1, len(docs), figsize=(6 * len(docs), 4.2), squeeze=False)
    for ax, doc in zip(axes[0], docs, strict=True):
        systems = [(f"docqa {m}", r["docqa"][doc][m]) for m in DOCQA_MODES]
        systems += [
            ("llama-cpp-python", r["plain"][doc]["window1"]),
            ("llama-server", r["llama_server"][doc]["no_spec"]),
            ("llama-server n-gram", r["llama_server"][doc]["best_ngram"]),
        ]
        width = 0.8 / len(systems)
        for i, (name, w) in enumerate(systems):
            values = [w[k]["decode_tps"] for k in WORKLOADS]
            ax.bar([x + i * width for x in range(len(WORKLOADS))], values, width, label=name)
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(WORKLOADS))], list(WORKLOADS))
        ax.set_title(f"{doc}: decode tok/s")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one document, one run, small grid")
    args = parser.parse_args()
    if not (BIN / "llama-server").exists():
        sys.exit("run `bash bench/setup.sh` first (builds llama-server and llama-bench)")
    model = embedded_model_path(ROOT / "data")
    docs = dict(list(DOCS.items())[:1]) if args.quick else DOCS
    texts = {d: (CASES / f).read_text(encoding="utf-8-sig")[:chars] for d, (f, chars) in docs.items()}
    runs = 1 if args.quick else args.runs
    workloads = WORKLOADS
    r: dict = {
        "machine": {
            "when": time.strftime("%Y-%m-%d"),
            "cpu": platform.processor() or platform.machine(),
            "threads": args.threads,
            "model": model.name,
            "python": platform.python_version(),
        }
    }
    t0 = time.time()
    r["docqa"] = bench_docqa(model, args.threads, texts, runs, workloads)
    first_doc = next(iter(texts))
    r["llama_bench_pp"] = llama_bench_pp(model, args.threads, r["docqa"][first_doc]["tokens"])
    r["llama_server"] = bench_llama_server(model, args.threads, texts, runs, workloads, args.quick)
    r["plain"] = bench_plain(model, args.threads, texts, runs, workloads)
    r["python_share"] = python_share(model, args.threads, texts[first_doc])
    r["ratios"] = ratios(r, first_doc)
    r["machine"]["seconds"] = round(time.time() - t0)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "bench.json").write_text(json.dumps(r, indent=1) + "\n")
    write_markdown(r, RESULTS / "bench.md")
    plot(r, RESULTS / "bench.png")
    print((RESULTS / "bench.md").read_text())


if __name__ == "__main__":
    main()
