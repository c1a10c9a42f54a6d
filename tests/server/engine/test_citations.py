"""Citations of finished answers (server/engine/citations.py) on a real server process."""

from __future__ import annotations

import json
import socket
import time

from testkit.live import Live

ALICE = "text/gutenberg/alice-in-wonderland-pg11.txt"


def _events(buf: bytes) -> list[tuple[str, dict]]:
    out = []
    for frame in buf.split(b"\r\n\r\n", 1)[1].decode(errors="replace").split("\n\n"):
        lines = dict(line.split(": ", 1) for line in frame.splitlines() if ": " in line and not line.startswith(":"))
        if "event" in lines:
            out.append((lines["event"], json.loads(lines["data"])))
    return out


def test_a_document_deleted_mid_answer_ends_that_answer_quietly(tmp_path, gemma_path, cases):
    """A DELETE while the document's first answer ran: the citation worker read the deleted text.json
    and logged an ERROR with a traceback. The answer ends as it would have (its tokens come from the
    sequence it holds), without citations (there is no text left to cite), and the log stays quiet."""
    server = Live(tmp_path / "data", gemma_path)
    try:
        server.start()
        doc_id = server.ingest("alice.txt", (cases / ALICE).read_text(encoding="utf-8-sig")[:2000].encode())
        body = json.dumps(
            {"question": "Tell me the story.", "max_tokens": 200, "temperature": 2.0, "seed": 3, "stop": []}
            | {"stream": True, "draft_tokens": 0}
        ).encode()
        s = socket.create_connection(("127.0.0.1", server.port), timeout=120)
        s.sendall(
            f"POST /v1/documents/{doc_id}/answers HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        buf = b""
        while buf.count(b"event: token") < 3:
            buf += s.recv(4096)
        c = server.conn(30)
        c.request("DELETE", f"/v1/documents/{doc_id}")
        assert c.getresponse().status == 204
        while part := s.recv(65536):
            buf += part
        s.close()
        events = _events(buf)
        kinds = [k for k, _ in events]
        assert kinds[-3:] == ["citations", "stats", "done"], kinds[-5:]
        assert dict(events)["citations"] == {"citations": [], "quote": None}
        assert dict(events)["stats"]["completion_tokens"] > 3
        assert server.get(f"/v1/documents/{doc_id}")[0] == 404
        time.sleep(0.5)  # the citation worker logs before it sends; the log is flushed line by line
    finally:
        server.stop()
    log = server.log.read_text()
    assert "Traceback" not in log.split("Shutting down")[0] and " ERROR " not in log, log[-3000:]
    assert "was deleted while it was answered" in log
