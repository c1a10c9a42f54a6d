"""Concurrent clients on one document: 1, 2, 4 and 8 streams, docqa against llama-server with the
same number of parallel slots, same model, threads and document, in one run.

Each round starts N clients at once; each asks its own question (quoting a different passage) and
streams a fixed number of tokens (no stop strings). Reported per system and N: aggregate decode
tok/s (all completion tokens over the round's wall time from the first request to the last token),
per-stream TTFT (mean and worst), and per-stream decode tok/s.

* docqa (continuous batching, DOCQA_N_SEQ_MAX=8): the document is ingested once; every question
  shares its prefix (seq_cp) and every step verifies all streams' drafts in one decode call.
* docqa-serial (DOCQA_N_SEQ_MAX=1): the same server answering one question at a time, the baseline
  for batching.
* llama-server -np N --kv-unified with its prompt cache: a warm-up round first puts the document in
  every slot, so its TTFT is the cached case, not a cold prefill. By default it re-evaluates the last
  sliding window (~512 tokens) of a cached Gemma 3 prompt from a context checkpoint; with
  ``--swa-full`` (its best setting for this workload, at the cost of full-size window caches) it
  reuses the whole cached document. Both are measured.

`.venv/bin/python -m bench.concurrent` (after `bash bench/setup.sh`; about 10 minutes on 2 cores).
Writes bench/results/concurrent.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.run import BIN, CASES, RESULTS, prompt_text  # noqa: E402
from bench.systems import DocqaServer, LlamaServer, Result  # noqa: E402
from runtime.embedded import embedded_model_path  # noqa: E402

DOC = ("alice-in-wonderland-pg11.txt", 12_000)  # ~3k prefix tokens: 8 llama-server slots hold it 8 times
STREAMS = (1, 2, 4, 8)
N_TOKENS = 64


def questions(text: str, n: int) -> list[str]:
    """n quoting questions, each about a different paragraph of the document."""
    paragraphs = [p.strip() for p in text.split("\n\n") if len(p.split()) >= 12]
    step = max(1, len(paragraphs) // n)
    return [f'Quote the paragraph that begins with "{" ".join(paragraphs[i * step].split()[:6])}".' for i in range(n)]


def round_of(ask, qs: list[str]) -> dict:
    """Start one client per question at once; collect Results and the round's wall time."""
    results: list[Result | None] = [None] * len(qs)
    barrier = threading.Barrier(len(qs))
    t_start: list[float] = []

    def client(i: int) -> None:
        barrier.wait()
        if i == 0:
            t_start.append(time.perf_counter())
        results[i] = ask(qs[i])

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(qs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t_start[0]
    done = [r for r in results if r is not None]
    tokens = sum(r.completion_tokens for r in done)
    return {
        "streams": len(qs),
        "aggregate_tps": round(tokens / wall, 2),
        "ttft_ms_mean": round(statistics.mean(r.ttft_ms for r in done), 1),
        "ttft_ms_max": round(max(r.ttft_ms for r in done), 1),
        "stream_tps_mean": round(statistics.mean(r.decode_tps for r in done), 2),
        "completion_tokens": tokens,
        "accepted": sum(r.accepted for r in done),
        "drafted": sum(r.drafted for r in done),
        "wall_s": round(wall, 2),
    }


def bench_docqa(model: Path, threads: int, text: str, n_seq_max: int) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        server = DocqaServer(model, threads, Path(tmp) / "data", n_ctx=32768, DOCQA_N_SEQ_MAX=str(n_seq_max))
        server.start()
        try:
            doc_id, _, _ = server.ingest("alice.txt", text)
            ask = lambda q: server.ask(doc_id, q, N_TOKENS, 0.0, 7, {})  # noqa: E731
            round_of(ask, questions(text, 1))  # warm-up
            return [round_of(ask, questions(text, n)) for n in STREAMS]
        finally:
            server.stop()


def bench_llama_server(model: Path, threads: int, text: str, extra: list[str]) -> list[dict]:
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in STREAMS:
            server = LlamaServer(BIN / "llama-server", model, threads, n_ctx=32768, parallel=n, spec=extra)
            server.start(Path(tmp) / f"llama-server-{n}.log")
            try:
                ask = lambda q: server.ask(prompt_text(text, q), N_TOKENS, 0.0, 7)  # noqa: E731,B023
                round_of(ask, [f"Warm-up {i}: who is Alice?" for i in range(n)])  # the document into every slot
                out.append(round_of(ask, questions(text, n)))
            finally:
                server.stop()
    return out


def write_markdown(r: dict, path: Path) -> None:
    lines = [
        "# Concurrent streams on one document",
        "",
        f"{r['machine']['when']}, {r['machine']['threads']} threads, {r['machine']['model']}, "
        f"~{r['doc_tokens']} document tokens, {N_TOKENS} greedy tokens per stream. "
        "Aggregate = all streams' tokens / round wall time.",
        "",
        "Aggregate decode tok/s:",
        "",
        "| streams | docqa | docqa-serial | llama-server | llama-server --swa-full | docqa / best llama-server "
        "| docqa accepted/drafted |",
        "|---|---|---|---|---|---|---|",
    ]
    rows = zip(r["docqa"], r["docqa_serial"], r["llama_server"], r["llama_server_swa_full"], strict=True)
    for d, s, ls, lf in rows:
        best = max(ls["aggregate_tps"], lf["aggregate_tps"])
        lines.append(
            f"| {d['streams']} | **{d['aggregate_tps']}** | {s['aggregate_tps']} | {ls['aggregate_tps']} | "
            f"{lf['aggregate_tps']} | {d['aggregate_tps'] / best:.2f}x | {d['accepted']}/{d['drafted']} |"
        )
    lines += [
        "",
        "Per-stream TTFT, mean / worst (ms):",
        "",
        "| streams | docqa | docqa-serial | llama-server | llama-server --swa-full |",
        "|---|---|---|---|---|",
    ]
    rows = zip(r["docqa"], r["docqa_serial"], r["llama_server"], r["llama_server_swa_full"], strict=True)
    for row in rows:
        lines.append(
            f"| {row[0]['streams']} | " + " | ".join(f"{x['ttft_ms_mean']} / {x['ttft_ms_max']}" for x in row) + " |"
        )
    lines.append("")
    for key in ("docqa", "docqa_serial", "llama_server", "llama_server_swa_full"):
        base = r[key][0]["aggregate_tps"]
        lines.append(
            f"* {key} scaling from 1 stream: "
            + ", ".join(f"{d['streams']}: {d['aggregate_tps'] / base:.2f}x" for d in r[key])
        )
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if not (BIN / "llama-server").exists():
        sys.exit("run `bash bench/setup.sh` first (builds llama-server)")
    model = embedded_model_path(ROOT / "data")
    file, chars = DOC
    text = (CASES / file).read_text(encoding="utf-8-sig")[:chars]
    from ingest.prompt import plain_layout
    from runtime.llama import Model

    m = Model(model)
    doc_tokens = len(plain_layout(m.add_bos).document_prefix(m, text))
    m.close()
    r = {
        "machine": {"when": time.strftime("%Y-%m-%d"), "threads": args.threads, "model": model.name},
        "doc_tokens": doc_tokens,
        "docqa": bench_docqa(model, args.threads, text, 8),
        "docqa_serial": bench_docqa(model, args.threads, text, 1),
        "llama_server": bench_llama_server(model, args.threads, text, []),
        "llama_server_swa_full": bench_llama_server(model, args.threads, text, ["--swa-full"]),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "concurrent.json").write_text(json.dumps(r, indent=1) + "\n")
    write_markdown(r, RESULTS / "concurrent.md")
    print((RESULTS / "concurrent.md").read_text())


if __name__ == "__main__":
    main()
