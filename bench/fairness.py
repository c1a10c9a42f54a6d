"""Fairness under a mixed load (issue 14): streams on one ready document while one client uploads a
long document and another asks a 5,000-word question. docqa (this checkout), docqa before the
chunked-prefill scheduler (``--old DIR``, a checkout of that commit), and llama-server ``--parallel 4``
get the same mix, in one run.

The mix, all starting together once the system is warm:

* four streaming clients, each asking three quoting questions in turn (64 greedy tokens each);
* at 3 s, an upload of a ~20k-token document (llama-server: a 1-token completion of that document,
  which is its prefill);
* at 6 s, a 5,000-word question about the ready document (docqa: a chat conversation, since one
  message may hold 20,000 characters; llama-server: one prompt), 16 tokens.

Reported per system: time to first byte of every stream (p50, max), the largest gap between two tokens
of any streaming answer, answers per minute of the four streaming clients, the upload's time to ready
and the long question's time to first token.

Usage: .venv/bin/python -m bench.fairness [--old DIR] [--threads 2] (needs ``bash bench/setup.sh``
for llama-server). Writes bench/results/fairness.{json,md}.
"""

from __future__ import annotations

import argparse
import http.client
import json
import platform
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.concurrent import questions
from bench.run import BIN, CASES, RESULTS, prompt_text
from bench.systems import LlamaServer
from runtime.embedded import embedded_model_path
from runtime.system import system_info
from testkit.live import Live

ALICE = (CASES / "alice-in-wonderland-pg11.txt").read_text(encoding="utf-8-sig")
BOOK = (CASES / "around-the-world-in-80-days-pg103.txt").read_text(encoding="utf-8-sig")
DOCUMENT = ALICE[:12_000]  # ~3k tokens
UPLOAD = BOOK[:80_000]  # ~20k tokens
LONG_WORDS = ALICE[12_000:].split()[:5_000]
N_TOKENS, ROUNDS, CLIENTS = 64, 3, 4


@dataclass
class Stream:
    start: float
    first_byte: float | None = None
    tokens: list[float] = field(default_factory=list)
    end: float | None = None


def _read_sse(response, stream: Stream, is_token) -> None:
    for raw in iter(response.readline, b""):
        now = time.perf_counter()
        stream.first_byte = stream.first_byte or now
        line = raw.decode("utf-8", "replace").strip()
        if is_token(line):
            stream.tokens.append(now)
        if line in ("event: done", "data: [DONE]", "event: error") or '"stop": true' in line:
            break
    stream.end = time.perf_counter()


def _post(port: int, path: str, body: dict) -> http.client.HTTPResponse:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    return c.getresponse()


class Docqa:
    def __init__(self, root: Path, tmp: Path, model: Path, threads: int) -> None:
        env = {"DOCQA_N_CTX": "32768", "DOCQA_N_THREADS": str(threads), "DOCQA_N_SEQ_MAX": "4"}
        self.server = Live(tmp / root.name, model, root=root, **env).start(timeout=600)
        self.doc = self.server.ingest("alice.txt", DOCUMENT.encode())

    def stream(self, question: str, n: int) -> Stream:
        s = Stream(time.perf_counter())
        body = {"question": question, "max_tokens": n, "stop": [], "stream": True}
        _read_sse(_post(self.server.port, f"/v1/documents/{self.doc}/answers", body), s, lambda x: x == "event: token")
        return s

    def upload(self) -> float:
        t0 = time.perf_counter()
        self.server.ingest("book.txt", UPLOAD.encode())
        return time.perf_counter() - t0

    def long_question(self) -> Stream:
        parts = [" ".join(LONG_WORDS[i : i + 2500]) for i in range(0, len(LONG_WORDS), 2500)]
        messages = []
        for i, part in enumerate(parts):
            messages += [{"role": "user", "content": part}] + (
                [{"role": "assistant", "content": "Go on."}] * (i < len(parts) - 1)
            )
        messages[-1]["content"] += "\nWhat is this about?"
        body = {"model": f"doc:{self.doc}", "messages": messages, "max_tokens": 16, "stream": True}
        s = Stream(time.perf_counter())
        _read_sse(
            _post(self.server.port, "/v1/chat/completions", body),
            s,
            lambda x: '"content": "' in x and '"content": ""' not in x,
        )
        return s

    def stop(self) -> None:
        self.server.stop()


class Llama:
    def __init__(self, tmp: Path, model: Path, threads: int) -> None:
        self.server = LlamaServer(
            BIN / "llama-server", model, threads, port=8131, parallel=CLIENTS, spec=["--swa-full"]
        )
        self.server.start(tmp / "llama-server.log")
        for _ in range(CLIENTS):  # warm every slot's prompt cache with the document
            _post(self.server.port, "/completion", {"prompt": prompt_text(DOCUMENT, "Hi"), "n_predict": 1}).read()

    def stream(self, question: str, n: int) -> Stream:
        s = Stream(time.perf_counter())
        body = {"prompt": prompt_text(DOCUMENT, question), "n_predict": n, "stream": True, "cache_prompt": True,
                "temperature": 0}  # fmt: skip
        _read_sse(
            _post(self.server.port, "/completion", body), s, lambda x: x.startswith("data: ") and '"content"' in x
        )
        return s

    def upload(self) -> float:
        t0 = time.perf_counter()
        _post(self.server.port, "/completion", {"prompt": prompt_text(UPLOAD, "Hi"), "n_predict": 1}).read()
        return time.perf_counter() - t0

    def long_question(self) -> Stream:
        s = Stream(time.perf_counter())
        body = {"prompt": prompt_text(DOCUMENT, " ".join(LONG_WORDS) + "\nWhat is this about?"), "n_predict": 16,
                "stream": True, "cache_prompt": True}  # fmt: skip
        _read_sse(
            _post(self.server.port, "/completion", body), s, lambda x: x.startswith("data: ") and '"content"' in x
        )
        return s

    def stop(self) -> None:
        self.server.stop()


def run_mix(system) -> dict:
    qs = questions(DOCUMENT, CLIENTS * ROUNDS)
    streams: list[Stream] = []
    out: dict = {}
    lock = threading.Lock()

    def client(i: int) -> None:
        for r in range(ROUNDS):
            s = system.stream(qs[i * ROUNDS + r], N_TOKENS)
            with lock:
                streams.append(s)

    def uploader() -> None:
        time.sleep(3)
        out["upload_s"] = system.upload()

    def long_asker() -> None:
        time.sleep(6)
        out["long"] = system.long_question()

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    threads += [threading.Thread(target=uploader), threading.Thread(target=long_asker)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ends = [s.end for s in streams]
    ttfb = [(s.first_byte - s.start) for s in [*streams, out["long"]]]
    gaps = [b - a for s in streams for a, b in zip(s.tokens, s.tokens[1:], strict=False)]
    long = out["long"]
    return {
        "ttfb_p50_s": round(statistics.median(ttfb), 3),
        "ttfb_max_s": round(max(ttfb), 3),
        "max_token_gap_s": round(max(gaps), 2),
        "answers_per_min": round(len(streams) / (max(ends) - t0) * 60, 1),
        "upload_to_ready_s": round(out["upload_s"], 1),
        "long_question_ttft_s": round(long.tokens[0] - long.start, 1) if long.tokens else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, default=None, help="a checkout of docqa before the chunked scheduler")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="docqa-fair-"))
    model = embedded_model_path(tmp / "model")
    root = Path(__file__).resolve().parent.parent
    systems = {"docqa": lambda: Docqa(root, tmp, model, args.threads)}
    if args.old:
        systems["docqa before (one prefill at a time)"] = lambda: Docqa(args.old.resolve(), tmp, model, args.threads)
    if (BIN / "llama-server").exists():
        systems["llama-server --parallel 4 --swa-full"] = lambda: Llama(tmp, model, args.threads)
    results = {}
    for name, make in systems.items():
        system = make()
        try:
            results[name] = run_mix(system)
        finally:
            system.stop()
        print(name, results[name], flush=True)
    (RESULTS / "fairness.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = [
        "# Fairness under a mixed load",
        "",
        f"One run, {args.threads} threads, embedded Gemma 3 270M Q4_K_M, n_ctx 32768, CPU "
        f"{platform.processor() or platform.machine()}; {system_info()}",
        "",
        f"{CLIENTS} clients stream {ROUNDS} quoting answers each ({N_TOKENS} greedy tokens) on a ~3k-token document; "
        "at 3 s a ~20k-token document is uploaded, at 6 s a 5,000-word question is asked (bench/fairness.py).",
        "",
        "| system | TTFB p50 | TTFB max | largest token gap | answers/min | upload to ready | long question TTFT |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        lines.append(
            f"| {name} | {r['ttfb_p50_s']} s | {r['ttfb_max_s']} s | {r['max_token_gap_s']} s | "
            f"{r['answers_per_min']} | {r['upload_to_ready_s']} s | {r['long_question_ttft_s']} s |"
        )
    (RESULTS / "fairness.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
