"""Fair under load (issue 14), against real server processes and sockets: streams start at once,
hang-ups cancel at every stage, a long prompt or a new document never stalls the running streams,
and a shutdown never hangs."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from testkit.live import Live

ALICE = "text/gutenberg/alice-in-wonderland-pg11.txt"
CRAZY = "pdf/pypdf-resources/crazyones.pdf"
LONG_ANSWER = {"question": "Tell me everything.", "temperature": 2.0, "seed": 1, "stop": [], "draft_tokens": 0}


class Stream:
    """A streamed request on a raw socket, read on a thread; every SSE line is kept with its arrival
    time (seconds after the request was sent)."""

    def __init__(self, server: Live, path: str, body: dict) -> None:
        payload = json.dumps({"stream": True, **body}).encode()
        self.sock = socket.create_connection(("127.0.0.1", server.port))
        self.t0 = time.monotonic()
        self.sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        self.lines: list[tuple[float, str]] = []
        self.first_byte: float | None = None
        self.closed = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        buf = b""
        try:
            while chunk := self.sock.recv(65536):
                now = time.monotonic() - self.t0
                self.first_byte = self.first_byte if self.first_byte is not None else now
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    self.lines.append((now, line.decode("utf-8", "replace").rstrip("\r")))
        except OSError:
            pass
        self.closed.set()

    def events(self) -> list[tuple[float, str]]:
        return [(t, line[7:]) for t, line in list(self.lines) if line.startswith("event: ")]

    def token_times(self) -> list[float]:
        return [t for t, kind in self.events() if kind == "token"]

    def wait_for(self, predicate, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < deadline, self.lines[-5:]
            time.sleep(0.05)

    def close(self) -> None:
        self.sock.close()


def _ready(server: Live, cases, path: str, chars: int | None = None) -> tuple[str, dict]:
    data = (cases / path).read_bytes()
    if chars is not None:
        data = data.decode("utf-8-sig")[:chars].encode()
    status, doc = server.upload(path.rsplit("/", 1)[-1], data)
    assert status == 202, doc
    info = server.wait_ready(doc["id"])
    assert info["status"] == "ready"
    return doc["id"], info


def _metric(server: Live, prefix: str) -> float:
    c = server.conn(10)
    c.request("GET", "/metrics")
    scrape = c.getresponse().read().decode()
    return sum(float(line.split()[-1]) for line in scrape.splitlines() if line.startswith(prefix))


def test_a_queued_stream_starts_at_once_and_hanging_up_leaves_the_queue(live, cases):
    server = live(DOCQA_SSE_HEARTBEAT_S="0.5", DOCQA_N_SEQ_MAX="1")
    doc_id, _ = _ready(server, cases, CRAZY)
    path = f"/v1/documents/{doc_id}/answers"
    running = Stream(server, path, {**LONG_ANSWER, "max_tokens": 400})
    running.wait_for(lambda: running.token_times())
    queued = Stream(server, path, {"question": "Who?", "max_tokens": 4})
    queued.wait_for(lambda: any(kind == "queued" for _, kind in queued.events()), timeout=10)
    assert queued.first_byte < 0.5  # headers and the queued event, although the only sequence is busy
    assert json.loads(next(line for _, line in queued.lines if line.startswith("data: "))[6:]) == {"position": 0}
    queued.wait_for(lambda: any(line == ": keep-alive" for _, line in queued.lines), timeout=10)
    assert not queued.token_times()  # still waiting: heartbeats keep proxies from timing out
    queued.close()  # hangs up while queued
    deadline = time.monotonic() + 5
    while server.get("/health")[1]["queue_depth"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server.get("/health")[1]["queue_depth"] == 0  # removed from the queue, though its turn has not come
    running.close()
    t0 = time.monotonic()
    status, body = server.post_json(path, {"question": "Who?", "max_tokens": 4})
    assert status == 200 and time.monotonic() - t0 < 10  # nothing ran for the two who left
    assert _metric(server, 'docqa_http_requests_total{route="/v1/documents/{doc_id}/answers",status="cancelled"}') == 2


def test_hanging_up_during_a_long_prefill_stops_it(live, cases):
    server = live(DOCQA_SSE_HEARTBEAT_S="0.5", DOCQA_N_CTX="32768")
    doc_id, _ = _ready(server, cases, CRAZY)
    words = (cases / ALICE).read_text(encoding="utf-8-sig").split()[:10_000]
    messages = [  # each message under the 20,000-character limit
        {"role": "user" if i % 2 == 0 else "assistant", "content": " ".join(words[i * 2500 : (i + 1) * 2500])}
        for i in range(4)
    ]
    messages.append({"role": "user", "content": "Who is Alice?"})
    chat = Stream(server, "/v1/chat/completions", {"model": f"doc:{doc_id}", "messages": messages})
    chat.wait_for(lambda: any(line.startswith("data: ") for _, line in chat.lines), timeout=10)
    assert chat.lines[0][1].startswith("HTTP/1.1 200") and chat.first_byte < 0.5  # before ~14k tokens of prefill
    time.sleep(1.0)
    chat.close()
    t0 = time.monotonic()
    status, _ = server.post_json(f"/v1/documents/{doc_id}/answers", {"question": "Who?", "max_tokens": 4})
    waited = time.monotonic() - t0
    assert status == 200 and waited < 8, waited  # not behind the whole prefill (~30 s of work)
    assert _metric(server, 'docqa_http_requests_total{route="/v1/chat/completions",status="cancelled"}') == 1


def _max_gap(stream: Stream, start: float, end: float) -> float:
    times = [t for t in stream.token_times() if start <= t <= end]
    return max((b - a for a, b in zip(times, times[1:], strict=False)), default=0.0)


@pytest.mark.slow  # ~30-70 s on 2 cores; keeps `make test` under 30 minutes
def test_a_long_prompt_or_a_new_document_does_not_stall_running_streams(live, cases):
    server = live(DOCQA_SSE_HEARTBEAT_S="0.5", DOCQA_N_CTX="32768", DOCQA_N_SEQ_MAX="2")
    doc_id, info = _ready(server, cases, ALICE, chars=12_000)
    path = f"/v1/documents/{doc_id}/answers"
    chunk_s = _chunk_seconds(server, cases)
    running = Stream(server, path, {**LONG_ANSWER, "max_tokens": 2000})
    running.wait_for(lambda: len(running.token_times()) >= 3)
    # A 5,000-word conversation (~7k tokens, ~14 chunks) from another user.
    words = (cases / ALICE).read_text(encoding="utf-8-sig").split()[3000:8000]
    messages = [
        {"role": "user", "content": " ".join(words[:2500])},
        {"role": "assistant", "content": "Go on."},
        {"role": "user", "content": " ".join(words[2500:]) + "\nWho is Alice?"},
    ]
    t_long = time.monotonic() - running.t0
    status, _ = server.post_json(
        "/v1/chat/completions", {"model": f"doc:{doc_id}", "messages": messages, "max_tokens": 2}
    )
    t_done = time.monotonic() - running.t0
    assert status == 200 and t_done - t_long > 4 * chunk_s  # a real prefill of several chunks
    gap = _max_gap(running, t_long, t_done)
    # One chunk per step at most (the old engine stalled the stream for the whole prefill): the bound
    # also holds when the machine's speed changes between measuring a chunk and this run.
    assert gap <= max(3 * chunk_s, 0.4 * (t_done - t_long)), (gap, chunk_s, t_done - t_long)
    # A new 7k-token document, ingested beside the running answer.
    text = (cases / ALICE).read_text(encoding="utf-8-sig")[20_000:48_000].encode()
    t_up = time.monotonic() - running.t0
    status, doc = server.upload("more.txt", text)
    assert status == 202
    assert server.wait_ready(doc["id"])["status"] == "ready"
    t_ready = time.monotonic() - running.t0
    gap = _max_gap(running, t_up, t_ready)
    assert t_ready - t_up > 4 * chunk_s, (t_ready - t_up, chunk_s)
    assert gap <= max(3 * chunk_s, 0.4 * (t_ready - t_up)), (gap, chunk_s, t_ready - t_up)
    running.close()


def _chunk_seconds(server: Live, cases) -> float:
    """Seconds this server takes to prefill one 512-token chunk, from an ingest of a few chunks."""
    t0 = time.monotonic()
    _, info = _ready(server, cases, ALICE, chars=9_000)
    return 512 * (time.monotonic() - t0) / info["tokens"]


@pytest.mark.slow  # ~17-22 s; test_serve.py checks a graceful SIGTERM, the fault loop a restart mid-answer
def test_sigterm_ends_answers_with_an_error_and_does_not_wait_for_slow_readers(live, cases, tmp_path):
    server = live(DOCQA_SSE_HEARTBEAT_S="0.5", DOCQA_SHUTDOWN_TIMEOUT_S="2")
    doc_id, _ = _ready(server, cases, CRAZY)
    path = f"/v1/documents/{doc_id}/answers"
    reader = Stream(server, path, {**LONG_ANSWER, "max_tokens": 3000})
    sleepers = []
    for _ in range(3):  # clients that never read: their sockets fill up
        s = socket.create_connection(("127.0.0.1", server.port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        body = json.dumps({"stream": True, **LONG_ANSWER, "max_tokens": 3000}).encode()
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(body)}\r\n\r\n".encode() + body)  # fmt: skip
        sleepers.append(s)
    reader.wait_for(lambda: len(reader.token_times()) >= 3)
    # ~1,500 tokens: still being prefilled when the signal follows the 202 (20,000 characters took
    # 18 s more to prefill after the restart).
    status, doc = server.upload("queued.txt", (cases / ALICE).read_text(encoding="utf-8-sig")[:6000].encode())
    assert status == 202
    t0 = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    server.proc.wait(timeout=20)
    assert time.monotonic() - t0 < 10  # 2 s for the answers, a short grace, no hang on the sleepers
    reader.closed.wait(5)
    errors = [line for _, line in reader.lines if "engine_stopped" in line]
    assert errors, reader.lines[-5:]  # the answer ended with an error event that says why
    for s in sleepers:
        s.close()
    again = live(
        Path(server.env["DOCQA_DATA_DIR"]), DOCQA_SSE_HEARTBEAT_S="0.5"
    )  # the queued document was kept, and is ingested now
    assert again.wait_ready(doc["id"])["status"] == "ready"
