"""Server behaviour against a real process: disconnects, streaming, concurrency, hostile HTTP bodies,
crash safety (SIGKILL) and access control. Case ids refer to ../shared/cases/manifest.json."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from testkit.live import Live

ALICE = "text/gutenberg/alice-in-wonderland-pg11.txt"


def _ready_doc(server: Live, cases, path=ALICE, chars=2000) -> str:
    """A new document made ready: ``chars`` of a text (~500 tokens; its size does not matter here, and
    each 1,000 tokens more is ~4 s of prefill on 2 cores), or the whole file."""
    raw = (cases / path).read_bytes()
    data = raw.decode("utf-8-sig")[:chars].encode() if path.endswith(".txt") else raw
    status, doc = server.upload(path.rsplit("/", 1)[-1], data)
    assert status == 202, doc
    assert server.wait_ready(doc["id"])["status"] == "ready"
    return doc["id"]


def _stream(server: Live, doc_id: str, body: dict, headers: dict | None = None) -> socket.socket:
    payload = json.dumps({"stream": True, **body}).encode()
    s = socket.create_connection(("127.0.0.1", server.port))
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    s.sendall(
        f"POST /v1/documents/{doc_id}/answers HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n{extra}\r\n".encode()
        + payload
    )
    return s


def test_http05_disconnect_frees_the_engine(live, cases):
    server = live()
    doc_id = _ready_doc(server, cases)
    s = _stream(server, doc_id, {"question": "Write a long story.", "max_tokens": 2000, "stop": [], "draft_tokens": 0})
    buf = b""
    while buf.count(b"event: token") < 5:
        buf += s.recv(4096)
    t0 = time.monotonic()
    s.close()
    # The next request's own work is one token (restore, question prefill, first token).
    status, body = server.post_json(f"/v1/documents/{doc_id}/answers", {"question": "Who?", "max_tokens": 1})
    freed = time.monotonic() - t0
    print(f"HTTP-05: the next question was answered {freed:.2f} s after the disconnect")
    assert status == 200 and freed < 5.0
    # With continuous batching the next question need not wait: the cancelled answer must still end
    # (2000 tokens would take far longer), and be in the metrics, its tokens counted.
    deadline = time.monotonic() + 5
    while server.get("/health")[1]["active_answers"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.get("/health")[1]["active_answers"] == 0
    c = server.conn(10)
    c.request("GET", "/metrics")
    scrape = c.getresponse().read().decode()
    assert "docqa_ttft_seconds_count 2.0" in scrape
    tokens = float(next(x for x in scrape.splitlines() if x.startswith("docqa_completion_tokens_total")).split()[1])
    assert tokens >= 6  # at least the 5 streamed before the disconnect, plus the one-token answer


def test_http06_stream_is_not_buffered_even_with_gzip(live, cases):
    server = live()
    doc_id = _ready_doc(server, cases, "pdf/pypdf-resources/crazyones.pdf")
    c = server.conn()
    t0 = time.monotonic()
    c.request(
        "POST",
        f"/v1/documents/{doc_id}/answers",
        json.dumps(
            {"question": "Quote the whole text.", "max_tokens": 96, "stop": [], "draft_tokens": 0, "stream": True}
        ),
        {"Content-Type": "application/json", "Accept-Encoding": "gzip"},
    )
    r = c.getresponse()
    assert r.getheader("content-encoding") is None
    first_token = None
    events = []
    for line in iter(r.readline, b""):
        if line.startswith(b"event: "):
            events.append(line[7:].strip().decode())
            if events[-1] == "token" and first_token is None:
                first_token = time.monotonic() - t0
            if events[-1] == "done":
                break
    total = time.monotonic() - t0
    print(f"HTTP-06: first token at {first_token:.2f} s, done at {total:.2f} s")
    assert events[-1] == "done" and events.count("token") > 3
    assert first_token < total / 2


# n_seq_max=8 only reports agreement (10 s); eight concurrent answers equal to alone, asserted, are
# tests/server/engine/test_batching.py's on F16.
@pytest.mark.parametrize("n_seq_max", [1, pytest.param(8, marks=pytest.mark.slow)])
def test_http07_eight_simultaneous_questions_all_complete_correctly(live, cases, n_seq_max):
    """All eight complete. One at a time (n_seq_max=1) each answer is exactly its answer alone; batched
    (n_seq_max=8) the row counts change the Q4_K_M numerics (notes §14), so agreement is reported,
    and the exact comparison is tests/server/engine/test_batching.py's, on F16."""
    server = live(DOCQA_N_SEQ_MAX=str(n_seq_max))
    doc_id = _ready_doc(server, cases, "pdf/sample-files/001-trivial/minimal-document.pdf")
    questions = [f"What is sentence {i} about?" for i in range(8)]
    # No drafts: the adaptive window learns from every answer, so the second asking could draft in
    # other shapes than the first and, on Q4_K_M, write another text (notes §14), queued or not.
    body = {"max_tokens": 12, "draft_tokens": 0}
    alone = {
        q: server.post_json(f"/v1/documents/{doc_id}/answers", {"question": q, **body})[1]["answer"] for q in questions
    }
    results: dict[str, tuple[int, dict]] = {}

    def ask(q: str) -> None:
        results[q] = server.post_json(f"/v1/documents/{doc_id}/answers", {"question": q, **body})

    threads = [threading.Thread(target=ask, args=(q,)) for q in questions]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(results) == 8
    same = 0
    for q in questions:
        status, body = results[q]
        assert status == 200 and body["stats"]["completion_tokens"] >= 1
        same += body["answer"] == alone[q]
    if n_seq_max == 1:
        assert same == 8  # queued: each gets its own, unchanged answer
    print(f"HTTP-07 n_seq_max={n_seq_max}: {same}/8 answers identical to the answer alone")


def test_http01_multipart_epilogue_is_cheap(live, cases):
    server = live()
    body = (cases / "http/multipart-epilogue-1MB.body").read_bytes()
    ctype = (cases / "http/multipart-epilogue-1MB.content-type").read_text().strip()
    cpu0 = server.cpu_seconds()
    c = server.conn()
    t0 = time.monotonic()
    c.request("POST", "/v1/documents", body, {"Content-Type": ctype})
    r = c.getresponse()
    r.read()
    wall, cpu = time.monotonic() - t0, server.cpu_seconds() - cpu0
    print(f"HTTP-01: {r.status} in {wall:.2f} s wall, {cpu:.2f} s server CPU")
    assert r.status < 500 and cpu < 1.0
    assert server.get("/health")[1]["status"] == "ok"


def test_http03_oversized_upload_is_refused_while_streaming(live):
    server = live(DOCQA_MAX_UPLOAD_BYTES=str(5 * 1024**2))
    rss0 = server.rss_kib()
    # Declared length over the limit: refused before any body byte is read.
    c = server.conn()
    c.putrequest("POST", "/v1/documents")
    c.putheader("Content-Type", "multipart/form-data; boundary=b")
    c.putheader("Content-Length", str(200 * 1024**2))
    c.endheaders()
    r = c.getresponse()
    assert r.status == 413 and json.loads(r.read())["error"]["type"] == "upload_too_large"
    # Chunked, no length: refused once the limit is passed, without buffering 200 MB.
    s = socket.create_connection(("127.0.0.1", server.port))
    s.sendall(
        b"POST /v1/documents HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; boundary=b\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    head = b'--b\r\nContent-Disposition: form-data; name="file"; filename="big.pdf"\r\n\r\n'
    s.sendall(b"%x\r\n%s\r\n" % (len(head), head))
    chunk = b"\0" * (1024 * 1024)
    sent, reply = 0, b""
    s.settimeout(0.5)
    try:
        while sent < 200 and b"413" not in reply:
            s.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            sent += 1
            try:
                reply += s.recv(4096)
            except TimeoutError:
                pass
    except (BrokenPipeError, ConnectionResetError):
        pass
    s.settimeout(5)
    try:
        reply += s.recv(4096)
    except (TimeoutError, ConnectionResetError):
        pass
    s.close()
    grown = (server.rss_kib() - rss0) / 1024
    print(f"HTTP-03: refused after {sent} MiB sent; server RSS grew {grown:.1f} MiB")
    assert b"413" in reply and sent < 100 and grown < 60
    assert server.get("/health")[1]["status"] == "ok"


@pytest.mark.slow  # one of the longest in make test (2 cores); its check stays in make test-slow
def test_sigkill_during_ingestion_never_leaves_a_half_made_document(live, cases, tmp_path):
    data = tmp_path / "crash"
    server = live(data)
    ready_id = _ready_doc(server, cases, "pdf/pypdf-resources/crazyones.pdf")
    before = server.post_json(f"/v1/documents/{ready_id}/answers", {"question": "Quote it.", "max_tokens": 16})[1]
    text = (cases / ALICE).read_text(encoding="utf-8-sig")[:24000].encode()
    status, doc = server.upload("long.txt", text)
    assert status == 202
    time.sleep(2.0)  # mid-prefill (~12 s of work)
    assert server.get(f"/v1/documents/{doc['id']}")[1]["status"] == "ingesting"
    workers = subprocess.run(["pgrep", "-P", str(server.proc.pid)], capture_output=True, text=True).stdout.split()
    assert workers, "the extraction worker should be running"
    server.stop(signal.SIGKILL)
    again = live(data)
    status, info = again.get(f"/v1/documents/{doc['id']}")
    assert info["status"] in ("ingesting", "failed")  # resumed, or failed with a reason
    final = again.wait_ready(doc["id"])
    assert final["status"] == "ready" or final["error"]
    print(f"after SIGKILL mid-ingest: {final['status']} {final['error']}")
    after = again.post_json(f"/v1/documents/{ready_id}/answers", {"question": "Quote it.", "max_tokens": 16})[1]
    assert after["answer"] == before["answer"]  # nothing that was ready is lost
    # The killed server's extraction worker died with it (no orphan outlives a crash).
    assert not [
        pid
        for pid in workers
        if Path(f"/proc/{pid}").exists()
        and "multiprocessing" in Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
    ]


def test_api_key_guards_v1_and_cors_is_off(server, cases):
    with server(api_key="s3cret") as client:
        assert client.get("/health").status_code == 200
        r = client.get("/v1/documents")
        assert r.status_code == 401 and r.json()["error"]["type"] == "unauthorized"
        assert client.get("/v1/documents", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert client.get("/v1/documents", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        preflight = client.options(
            "/v1/documents", headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}
        )
        assert "access-control-allow-origin" not in preflight.headers


@pytest.mark.slow  # ~30-70 s on 2 cores; keeps `make test` under 30 minutes
def test_calibration_is_kept_across_restarts(live, tmp_path):
    data = tmp_path / "calib"
    server = live(data, DOCQA_CALIBRATION_FILE=None)  # its default place, not the tests' shared file
    table = json.loads((data / "calibration.json").read_text())
    server.stop()
    live(data, DOCQA_CALIBRATION_FILE=None)
    assert json.loads((data / "calibration.json").read_text()) == table  # reused, not measured again
    (entry,) = table.values()
    assert len(entry["verify"]) == 17 and entry["verify"][16] > entry["verify"][0] > 0


def test_a_long_answer_does_not_hold_back_short_ones(live, cases):
    """KV cells are reserved only up to answer_reserve per question: a max_tokens far beyond that
    competes for free cells instead of blocking admission of every other question."""
    server = live(DOCQA_N_SEQ_MAX="4")
    doc_id = _ready_doc(server, cases)
    body = {"question": "Tell me everything.", "max_tokens": 6000, "temperature": 2.0, "seed": 1, "stop": []}
    s = _stream(server, doc_id, body)
    try:
        s.settimeout(60)
        buf = b""
        while b"event: token" not in buf:  # the long answer is running (headers may arrive alone)
            chunk = s.recv(65536)
            assert chunk, buf
            buf += chunk
        status, short = server.post_json(f"/v1/documents/{doc_id}/answers", {"question": "Who?", "max_tokens": 8})
        assert status == 200 and short["stats"]["completion_tokens"] >= 1
        assert server.get("/health")[1]["active_answers"] == 1  # answered while the long one goes on
    finally:
        s.close()


def test_non_streaming_client_that_hangs_up_cancels_its_answer(live, cases):
    server = live()
    doc_id = _ready_doc(server, cases)
    c = server.conn(timeout=1.5)
    body = {"question": "Tell me everything.", "max_tokens": 3000, "temperature": 2.0, "seed": 1, "stop": []}
    c.request("POST", f"/v1/documents/{doc_id}/answers", json.dumps(body), {"Content-Type": "application/json"})
    with pytest.raises(TimeoutError):
        c.getresponse()
    c.close()
    deadline = time.monotonic() + 10
    while server.get("/health")[1]["active_answers"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server.get("/health")[1]["active_answers"] == 0  # 3000 tokens would take far longer
