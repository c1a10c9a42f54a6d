"""The systems the benchmark drives, each behind the same small interface: start on a document,
answer one prompt (greedy or seeded sampling, fixed token count), report TTFT, decode tok/s and
draft acceptance.

* docqa (``python -m server`` as a subprocess, HTTP + SSE), in three draft modes.
* plain llama-cpp-python: the high-level ``Llama`` with no draft model (re-reads the prompt unless
  its own prefix cache matches).
* llama.cpp's llama-server (built by bench/setup.sh), with and without n-gram speculation.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Result:
    ttft_ms: float
    decode_tps: float
    completion_tokens: int
    drafted: int = 0
    accepted: int = 0
    text: str = ""


def _wait_http(port: int, path: str, ok, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", path)
            r = c.getresponse()
            body = r.read()
            if ok(r.status, body):
                return
        except OSError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"server on port {port} did not become ready")


def _sse(response) -> list[tuple[str, dict]]:
    """Read an SSE stream; returns (event, data) with arrival times in data['_t']."""
    events, kind = [], "message"
    for raw in iter(response.readline, b""):
        line = raw.decode("utf-8").rstrip("\r\n")
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            payload = line[6:]
            if payload.strip() == "[DONE]":
                break
            data = json.loads(payload)
            data["_t"] = time.perf_counter()
            events.append((kind, data))
            if kind in ("done", "error"):
                break
    return events


class DocqaServer:
    """docqa as a user runs it, on its own port and data directory."""

    def __init__(
        self, model: Path, threads: int, data_dir: Path, port: int = 8101, n_ctx: int = 32768, **env: str
    ) -> None:
        self.port, self.env = port, dict(os.environ)
        self.env.update(
            DOCQA_MODEL_PATH=str(model),
            DOCQA_N_THREADS=str(threads),
            DOCQA_DATA_DIR=str(data_dir),
            DOCQA_PORT=str(port),
            DOCQA_N_CTX=str(n_ctx),
            **env,
        )
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        log = open(Path(self.env["DOCQA_DATA_DIR"]).with_suffix(".log"), "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "server"], cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT
        )
        _wait_http(self.port, "/health", lambda s, b: s == 200 and json.loads(b).get("status") == "ok")

    def stop(self) -> None:
        if self.proc:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc = None

    def ingest(self, name: str, text: str) -> tuple[str, float, int]:
        """Upload and wait for ready: (doc id, seconds, prefix tokens)."""
        boundary = uuid.uuid4().hex
        body = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n\r\n'.encode()
            + text.encode()
            + f"\r\n--{boundary}--\r\n".encode()
        )
        t0 = time.perf_counter()
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        c.request("POST", "/v1/documents", body, {"Content-Type": f"multipart/form-data; boundary={boundary}"})
        doc = json.loads(c.getresponse().read())
        while True:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            c.request("GET", f"/v1/documents/{doc['id']}")
            info = json.loads(c.getresponse().read())
            if info["status"] != "ingesting":
                break
            time.sleep(0.05)
        if info["status"] != "ready":
            raise RuntimeError(f"ingest failed: {info}")
        return doc["id"], time.perf_counter() - t0, info["tokens"]

    def ask(self, doc_id: str, question: str, n: int, temperature: float, seed: int, mode: dict) -> Result:
        body = {
            "question": question,
            "max_tokens": n,
            "temperature": temperature,
            "seed": seed,
            "stop": [],
            "stream": True,
            **mode,
        }
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        t0 = time.perf_counter()
        c.request("POST", f"/v1/documents/{doc_id}/answers", json.dumps(body), {"Content-Type": "application/json"})
        events = _sse(c.getresponse())
        tokens = [d for k, d in events if k == "token"]
        stats = next(d for k, d in events if k == "stats")
        return Result(
            ttft_ms=(tokens[0]["_t"] - t0) * 1000 if tokens else float("nan"),
            decode_tps=stats["decode_tokens_per_s"],
            completion_tokens=stats["completion_tokens"],
            drafted=stats["drafted_tokens"],
            accepted=stats["accepted_tokens"],
            text="".join(d["text"] for d in tokens),
        )


class LlamaServer:
    """llama.cpp's llama-server with the prompt cache on; ``spec`` adds --spec-type arguments."""

    def __init__(
        self,
        binary: Path,
        model: Path,
        threads: int,
        port: int = 8102,
        n_ctx: int = 32768,
        spec: list[str] | None = None,
        parallel: int = 1,
    ) -> None:
        self.cmd = [
            str(binary),
            "-m",
            str(model),
            "-t",
            str(threads),
            "-tb",
            str(threads),
            "-c",
            str(n_ctx),
            "--port",
            str(port),
            "-np",
            str(parallel),
            *(["--kv-unified"] if parallel > 1 else []),
            "-b",
            "512",
            "-ub",
            "512",
            "--no-webui",
            "--cache-ram",
            "8192",
            *(spec or []),
        ]
        self.port = port
        self.proc: subprocess.Popen | None = None

    def start(self, log: Path) -> None:
        self.proc = subprocess.Popen(self.cmd, stdout=open(log, "ab"), stderr=subprocess.STDOUT)  # noqa: SIM115
        _wait_http(self.port, "/health", lambda s, b: s == 200)

    def stop(self) -> None:
        if self.proc:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc = None

    def ask(self, prompt: str, n: int, temperature: float, seed: int) -> Result:
        body = {
            "prompt": prompt,
            "n_predict": n,
            "temperature": temperature,
            "seed": seed,
            "cache_prompt": True,
            "stream": True,
            "ignore_eos": False,
            "top_k": 0,
            "top_p": 1.0,
            "min_p": 0.0,
            "repeat_penalty": 1.0,
            "samplers": ["temperature"] if temperature > 0 else ["top_k"],
        }
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=900)
        t0 = time.perf_counter()
        c.request("POST", "/completion", json.dumps(body), {"Content-Type": "application/json"})
        events = _sse(c.getresponse())
        pieces = [d for _, d in events if d.get("content")]
        timings = next((d["timings"] for _, d in reversed(events) if "timings" in d), {})
        return Result(
            ttft_ms=(pieces[0]["_t"] - t0) * 1000 if pieces else float("nan"),
            decode_tps=timings.get("predicted_per_second", float("nan")),
            completion_tokens=timings.get("predicted_n", 0),
            drafted=timings.get("draft_n", 0),
            accepted=timings.get("draft_n_accepted", 0),
            text="".join(d["content"] for d in pieces),
        )


class PlainLlamaCppPython:
    """The high-level ``Llama`` API, no draft model; streaming to time the first token."""

    def __init__(self, model: Path, threads: int, n_ctx: int = 32768) -> None:
        from llama_cpp import Llama

        self.llm = Llama(
            str(model), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, n_batch=512, verbose=False
        )

    def ask(self, prompt: str, n: int, temperature: float, seed: int) -> Result:
        t0 = time.perf_counter()
        times, text = [], []
        for chunk in self.llm.create_completion(
            prompt,
            max_tokens=n,
            temperature=temperature,
            seed=seed,
            top_k=0,
            top_p=1.0,
            min_p=0.0,
            repeat_penalty=1.0,
            stream=True,
        ):
            times.append(time.perf_counter())
            text.append(chunk["choices"][0]["text"])
        tps = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else float("nan")
        return Result(ttft_ms=(times[0] - t0) * 1000, decode_tps=tps, completion_tokens=len(times), text="".join(text))

    def reset(self) -> None:
        """Forget the cached prefix, so the next call is a cold prefill."""
        self.llm.reset()  # n_tokens = 0: no cached prefix to match

    def close(self) -> None:
        self.llm.close()
