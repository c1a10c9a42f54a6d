"""Questions asked while another document is being read (issue 36): their time to first token, and
what the reading loses, with prefill chunks sized by time (``DOCQA_PREFILL_SLICE_S``) against chunks
of ``n_ubatch`` tokens (a slice too long to matter), on the default model.

For each setting, a fresh server (``python -m server``): document A (~1k tokens) is read first; then
document B (~6k tokens) is uploaded, and while it is read ten short questions about A are asked one
after another (streamed, 8 greedy tokens each, 1 s apart). Reported: TTFT p50 and max of those ten,
B's reading rate (prefix tokens / upload-to-ready seconds), and the same reading alone (no question).

Run on an idle machine: ``python -m bench.reading`` (``--help``). Writes bench/results/reading.{json,md}.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from bench.quality import machine
from runtime.models import model_path
from runtime.system import system_info
from testkit.live import Live

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT.parent / "shared" / "cases" / "text" / "gutenberg"
ALICE = (CASES / "alice-in-wonderland-pg11.txt").read_text(encoding="utf-8-sig")
BOOK = (CASES / "around-the-world-in-80-days-pg103.txt").read_text(encoding="utf-8-sig")
DOC_A = ALICE[3_000:7_000]  # ~1k tokens
DOC_B = BOOK[10_000:34_000]  # ~6k tokens
QUESTIONS = ["Who is the story about?", "What did Alice see?", "Where did the Rabbit go?", "What was on the table?",
             "What did Alice drink?", "Who was late?", "What fell down?", "What was written on the bottle?",
             "What did the key open?", "How did Alice feel?"]  # fmt: skip


def ttft(live: Live, doc_id: str, question: str) -> float:
    """Seconds from sending a streamed question to its first ``token`` (or ``quote``) event."""
    body = json.dumps({"question": question, "max_tokens": 8, "stream": True, "mode": "direct"})
    c = http.client.HTTPConnection("127.0.0.1", live.port, timeout=900)
    t0 = time.perf_counter()
    c.request("POST", f"/v1/documents/{doc_id}/answers", body, {"Content-Type": "application/json"})
    r, first = c.getresponse(), None
    for raw in iter(r.readline, b""):
        line = raw.decode().strip()
        if first is None and line in ("event: token", "event: quote"):
            first = time.perf_counter() - t0
        if line == "event: done":
            break
    c.close()
    return first if first is not None else float("nan")


def run(model: Path, slice_s: str, threads: int, with_questions: bool) -> dict:
    data = Path(tempfile.mkdtemp(prefix="docqa-reading-"))
    live = Live(data / "data", model, DOCQA_N_THREADS=str(threads), DOCQA_N_CTX="12288", DOCQA_PREFILL_SLICE_S=slice_s)
    live.start(timeout=900)
    try:
        _, a = live.upload("a.txt", DOC_A.encode())
        live.wait_ready(a["id"], timeout=1800)
        ttft(live, a["id"], "Warm up.")
        times: list[float] = []
        t0 = time.perf_counter()
        _, b = live.upload("b.txt", DOC_B.encode())
        if with_questions:

            def ask() -> None:
                for q in QUESTIONS:
                    times.append(ttft(live, a["id"], q))
                    time.sleep(1.0)

            asker = threading.Thread(target=ask)
            asker.start()
        info = live.wait_ready(b["id"], timeout=3600)
        read_s = time.perf_counter() - t0
        if with_questions:
            asker.join()
    finally:
        live.stop()
    out = {"slice_s": slice_s, "tokens": info["tokens"], "read_s": read_s, "read_tps": info["tokens"] / read_s}
    if times:
        out |= {"ttft_p50": statistics.median(times), "ttft_max": max(times), "ttft": times}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="qwen-coder-1.5b")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "reading")
    args = p.parse_args()
    path = model_path(args.model, Path(tempfile.gettempdir()) / "docqa-models")
    load0 = os.getloadavg()
    rows = [
        {"case": "reading alone", **run(path, "0.5", args.threads, False)},
        {"case": "questions, slices of 0.5 s", **run(path, "0.5", args.threads, True)},
        {"case": "questions, chunks of n_ubatch", **run(path, "60", args.threads, True)},
    ]
    results = {"model": args.model, "rows": rows, "machine": {**machine(), "load_before": load0,
               "load_after": os.getloadavg(), "system_info": system_info()}}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=1))
    m = results["machine"]
    lines = [
        f"# Questions during a reading ({args.model}, bench/reading.py)",
        "",
        f"{m['cpu']}, {m['cores']} cores, {args.threads} threads; load before/after {m['load_before']} / "
        f"{m['load_after']}; {m['system_info']}",
        "",
        "| case | reading tok/s | TTFT p50 s | TTFT max s |",
        "|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['case']} | {r['read_tps']:.1f} | {r.get('ttft_p50', float('nan')):.2f} | "
                     f"{r.get('ttft_max', float('nan')):.2f} |")  # fmt: skip
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
