"""Nothing costs memory before it is allowed, measured on a real server process (testkit/live.py):
unauthenticated and oversized bodies are refused before they are read, an over-budget upload is
refused after tokenizing about the budget, and slow clients are timed out (headers and bodies)."""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Callable

import pytest

from testkit.live import Live

MIB = 1024**2
AROUND = "text/gutenberg/around-the-world-in-80-days-pg103.txt"


class PeakRss:
    """The server's RSS sampled every 20 ms while the block runs: ``peak_mib`` above ``idle_mib``."""

    def __init__(self, server: Live) -> None:
        self.server = server
        self.idle_mib = self.peak_mib = server.rss_kib() / 1024
        self._stop = threading.Event()

    def __enter__(self) -> PeakRss:
        def sample() -> None:
            while not self._stop.wait(0.02):
                self.peak_mib = max(self.peak_mib, self.server.rss_kib() / 1024)

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def grown_mib(self) -> float:
        return self.peak_mib - self.idle_mib


def _send_body(port: int, head: bytes, n_mib: int, out: list, chunked: bool = False) -> None:
    """Send ``head`` then up to ``n_mib`` MiB of body, 1 MiB at a time (as chunks with ``chunked``),
    reading the server's answer as soon as there is one; append (status, seconds, MiB sent) to ``out``
    (status 0: the connection was reset before an answer could be read)."""
    piece = bytes(MIB)
    chunk = b"%x\r\n%s\r\n" % (MIB, piece) if chunked else piece
    t0, sent, reply = time.monotonic(), 0, b""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        try:
            s.sendall(head)
            while sent < n_mib and not select.select([s], [], [], 0.005)[0]:
                s.sendall(chunk)
                sent += 1
            while b"\r\n" not in reply and (part := s.recv(4096)):
                reply += part
        except (BrokenPipeError, ConnectionResetError):
            pass
    status = int(reply.split(b" ")[1]) if reply.startswith(b"HTTP/1.1 ") else 0
    out.append((status, time.monotonic() - t0, sent))


def _parallel(n: int, job: Callable[[list], None]) -> list:
    out: list = []
    threads = [threading.Thread(target=job, args=(out,)) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_unauthenticated_and_oversized_bodies_cost_no_memory(live):
    """20 parallel 50 MB JSON bodies without the key get 401 at once, and 20 with the key but over the
    JSON limit get 413 at once (declared length, then a chunked body counted as it streams in);
    the server's RSS stays within 100 MB of idle."""
    server = live(DOCQA_API_KEY="s3cret")
    head = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    sized = head + f"Content-Length: {50 * MIB}\r\n"
    key = "Authorization: Bearer s3cret\r\n"
    with PeakRss(server) as rss:
        anon = _parallel(20, lambda out: _send_body(server.port, (sized + "\r\n").encode(), 50, out))
        big = _parallel(20, lambda out: _send_body(server.port, (sized + key + "\r\n").encode(), 50, out))
        chunked = (head + key + "Transfer-Encoding: chunked\r\n\r\n").encode()
        framed = _parallel(5, lambda out: _send_body(server.port, chunked, 50, out, chunked=True))
    print(
        f"20 x 50 MB unauthenticated: {sorted({s for s, _, _ in anon})} in <= {max(t for _, t, _ in anon):.2f} s, "
        f"<= {max(m for _, _, m in anon):.0f} MiB sent each; 20 x 50 MB over the JSON limit: "
        f"{sorted({s for s, _, _ in big})}; chunked: {sorted({s for s, _, _ in framed})} after "
        f"<= {max(m for _, _, m in framed):.0f} MiB; RSS idle {rss.idle_mib:.0f} MiB, peak +{rss.grown_mib:.1f} MiB"
    )
    # Refused before the body: 401 / 413 at once, or (status 0) the connection closed with the answer
    # unread while the client was still sending, which a loaded machine makes likelier (CI saw it);
    # either way hardly any of the 50 MB went out.
    for refused, status in ((anon, 401), (big, 413)):
        assert status in {s for s, _, _ in refused} and {s for s, _, _ in refused} <= {0, status}, refused
        assert max(t for _, t, _ in refused) < 5 and max(m for _, _, m in refused) < 10, refused
    # A chunked body has no declared length: it is cut off after the 1 MiB limit, while the client
    # may still be sending (its answer can then be lost to a reset, status 0; never read on, though).
    assert 413 in {s for s, _, _ in framed} and {s for s, _, _ in framed} <= {0, 413}
    assert max(m for _, _, m in framed) < 10
    assert rss.grown_mib < 100
    assert server.get("/health")[1]["status"] == "ok"


# A memory soak (four 60 MB uploads, 35 s on 2 cores): make test keeps the bound it relies on, that
# an over-budget text is refused after tokenizing about the budget (tests/ingest/test_budget.py).
@pytest.mark.slow
def test_an_over_budget_upload_costs_a_small_multiple_of_the_limit(live, cases):
    """A 60 MB text (~13M tokens against a 7,168-token budget) is refused with the part that fits,
    after tokenizing about the budget; the extraction worker returns only the characters a budget
    could hold. Peak RSS within 3x the 64 MiB upload limit per upload in flight, for one upload and
    for three at once (4.3 GB and 10.6 GB before)."""
    server = live(DOCQA_LONG_DOCUMENTS="refuse")  # the 413 of today; segmenting is tests/server/api/test_segments.py
    data = (cases / AROUND).read_bytes() * 160
    assert len(data) > 60e6
    with PeakRss(server) as one:
        t0 = time.monotonic()
        status, body = server.upload("big.txt", data)
        took = time.monotonic() - t0
    assert status == 413 and body["error"]["type"] == "document_too_long", body
    assert body["error"]["fits"]["chars"][0] == 0 and body["error"]["estimated"]
    with PeakRss(server) as three:
        results = _parallel(3, lambda out: out.append(server.upload("big.txt", data)))
    print(
        f"60 MB over budget: 413 in {took:.1f} s, RSS +{one.grown_mib:.0f} MiB; three at once: "
        f"{sorted(s for s, _ in results)}, RSS +{three.grown_mib:.0f} MiB"
    )
    assert [s for s, _ in results] == [413] * 3
    assert one.grown_mib < 3 * 64 and three.grown_mib < 3 * 3 * 64


def test_slow_headers_and_slow_bodies_are_timed_out(live):
    """150 connections that stop mid-headers and 150 that stop mid-body (300 were all still open
    after 70 s before): all are closed within the header and body timeouts (2 s here), the body ones
    with a 408."""
    server = live(DOCQA_HEADER_TIMEOUT_S="2", DOCQA_BODY_TIMEOUT_S="2")
    body_head = (
        b"POST /v1/documents HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; boundary=b\r\n"
        b"Content-Length: 100000\r\n\r\n"
        b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\nab'
    )
    socks = []
    for i in range(300):
        s = socket.create_connection(("127.0.0.1", server.port), timeout=15)
        s.sendall(body_head if i % 2 else b"GET /health HTTP/1.1\r\nHost: 127.0")
        socks.append(s)
    t0 = time.monotonic()
    replies = []
    for s in socks:
        reply = b""
        try:
            while part := s.recv(4096):
                reply += part
        except (TimeoutError, ConnectionResetError):
            reply += b"<still open>" if isinstance(reply, bytes) else b""
        replies.append(reply)
        s.close()
    waited = time.monotonic() - t0
    statuses = [r.split(b" ")[1] if r.startswith(b"HTTP/1.1 ") else r[:20] for r in replies]
    print(f"300 slow clients: all closed after {waited:.1f} s; statuses {sorted(set(statuses))}")
    assert all(b"<still open>" not in r for r in replies) and waited < 10
    assert set(statuses[1::2]) == {b"408"} and set(statuses[0::2]) == {b"408"}
    body = json.loads(replies[1].split(b"\r\n\r\n", 1)[1])
    assert body["error"]["type"] == "body_timeout"
    assert server.get("/health")[1]["status"] == "ok"


def _trickle(port: int, head: bytes, every_s: float, give_up_s: float) -> tuple[bytes, float, int]:
    """Send ``head``, then one body byte every ``every_s`` until the server answers (or ``give_up_s``
    passes): (the reply, seconds from the first body byte to the reply, body bytes sent)."""
    with socket.create_connection(("127.0.0.1", port), timeout=give_up_s + 5) as s:
        s.sendall(head)
        t0, sent, reply = time.monotonic(), 0, b""
        while time.monotonic() - t0 < give_up_s:
            if select.select([s], [], [], every_s)[0]:
                try:
                    while part := s.recv(4096):
                        reply += part
                except ConnectionResetError:
                    pass
                break
            try:
                s.sendall(b" ")
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += 1
        return reply, time.monotonic() - t0, sent


def test_a_body_trickled_byte_by_byte_is_cut_off_at_the_whole_body_deadline(live):
    """A byte every second never trips the per-chunk DOCQA_BODY_TIMEOUT_S (2 s here): a slow-loris body
    stayed open for as long as it trickled (>= 70 s at a byte every 5 s). DOCQA_BODY_DEADLINE_S (4 s
    here) bounds the whole body: 408 in bounded time, for a JSON body and an upload alike."""
    server = live(DOCQA_BODY_TIMEOUT_S="2", DOCQA_BODY_DEADLINE_S="4")
    heads = [
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 1000\r\n\r\n{",
        b"POST /v1/documents HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; boundary=b\r\n"
        b'Content-Length: 100000\r\n\r\n--b\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\nab',
    ]
    results = _parallel(2, lambda out, heads=list(heads): out.append(_trickle(server.port, heads.pop(), 1.0, 15)))
    for reply, took, sent in results:
        print(f"trickled {sent} bytes over {took:.1f} s: {reply[:40]!r}")
        assert reply.startswith(b"HTTP/1.1 408 "), reply[:200]
        assert 3.5 < took < 8 and sent >= 3
        error = json.loads(reply.split(b"\r\n\r\n", 1)[1])["error"]
        assert error["type"] == "body_timeout" and "DOCQA_BODY_DEADLINE_S" in error["message"]
    assert server.get("/health")[1]["status"] == "ok"
