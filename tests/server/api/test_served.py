"""GET /v1/documents/{id}/file (server/api/served.py): the upload as sent, its content type by kind,
inline with a safe name, behind the API key, a part served whole, and the 404 / 409 cases; on the
real app and the embedded model."""

from __future__ import annotations

from pathlib import Path

from server.api.served import disposition, file_name, media_type
from store.docstore import DocRecord
from tests.conftest import upload

CRAZY = "pdf/pypdf-resources/crazyones.pdf"
KEY = "file-test-key"
HOSTILE = b"<html><body><p>A page.</p><script>fetch('/v1/documents')</script></body></html>"


def _doc(name: str, kind: str, encoding: str | None = None) -> DocRecord:
    return DocRecord("a1", name, "f" * 64, kind, 1, 10, 10, "ready", None, 0.0, encoding=encoding)


def test_names_and_types_come_from_the_document_not_the_request():
    assert file_name(_doc("book.pdf (pages 5-9)", "pdf")) == "book.pdf"
    assert file_name(_doc("notes.txt (characters 0-5000)", "text")) == "notes.txt"
    assert file_name(_doc("scan", "pdf")) == "scan.pdf"
    assert file_name(_doc("README.md", "text")) == "README.md"
    assert file_name(_doc("page.htm", "html")) == "page.htm"
    assert file_name(_doc("..", "pdf")) == "document.pdf"
    header = disposition('Ré"sumé;\r\nX: y.pdf')
    assert header.startswith("inline; filename=\"R__sum____X_ y.pdf\"; filename*=UTF-8''")
    assert "\r" not in header and "\n" not in header and header.count('"') == 2
    assert media_type(_doc("a.md", "text", "utf-8"), "a.md") == "text/markdown; charset=utf-8"
    assert media_type(_doc("a.txt", "text", "cp1252"), "a.txt") == "text/plain; charset=cp1252"
    assert media_type(_doc("a.pdf", "pdf"), "a.pdf") == "application/pdf"


def test_the_stored_upload_is_served_inline_behind_the_key(server, cases):
    pdf = (cases / CRAZY).read_bytes()
    with server(api_key=KEY) as client:
        auth = {"Authorization": f"Bearer {KEY}"}
        client.headers.update(auth)
        doc = upload(client, cases / CRAZY)
        r = client.get(f"/v1/documents/{doc['id']}/file")
        assert r.status_code == 200 and r.content == pdf
        assert r.headers["content-type"] == "application/pdf"
        assert r.headers["content-disposition"].startswith('inline; filename="crazyones.pdf"')
        assert r.headers["x-content-type-options"] == "nosniff"
        assert "content-security-policy" not in r.headers  # the browser's PDF viewer must still open it
        etag = r.headers["etag"]
        # If-None-Match compares weakly, and * matches any current file (RFC 9110 §13.1.2): W/ and * got 200.
        for tags in (etag, f"W/{etag}", '"other", ' + f"W/{etag}", "*"):
            again = client.get(f"/v1/documents/{doc['id']}/file", headers={"If-None-Match": tags})
            assert again.status_code == 304 and again.content == b"", tags
            assert again.headers["etag"] == etag
        assert client.get(f"/v1/documents/{doc['id']}/file", headers={"If-None-Match": '"other"'}).status_code == 200
        head = client.head(f"/v1/documents/{doc['id']}/file")
        assert head.status_code == 200 and head.headers["content-length"] == str(len(pdf))

        # Ranges, as a file response serves them (PDF.js asks for them on a large file).
        part = client.get(f"/v1/documents/{doc['id']}/file", headers={"Range": "bytes=100-199"})
        assert part.status_code == 206 and part.content == pdf[100:200], part.headers
        assert part.headers["content-range"] == f"bytes 100-199/{len(pdf)}" and r.headers["accept-ranges"] == "bytes"
        tail = client.get(f"/v1/documents/{doc['id']}/file", headers={"Range": "bytes=-10"})
        assert tail.status_code == 206 and tail.content == pdf[-10:]
        stale = client.get(f"/v1/documents/{doc['id']}/file", headers={"Range": "bytes=0-9", "If-Range": '"old"'})
        assert stale.status_code == 200 and stale.content == pdf  # the If-Range names another file: all of it
        fresh = client.get(f"/v1/documents/{doc['id']}/file", headers={"Range": "bytes=0-9", "If-Range": etag})
        assert fresh.status_code == 206 and fresh.content == pdf[:10]
        r = client.get(f"/v1/documents/{doc['id']}/file", headers={"Range": f"bytes={len(pdf)}-"})
        assert r.status_code == 416 and r.headers["content-range"] == f"bytes */{len(pdf)}"

        # Behind the key, like the rest of /v1.
        del client.headers["Authorization"]
        r = client.get(f"/v1/documents/{doc['id']}/file")
        assert r.status_code == 401 and r.json()["error"]["type"] == "unauthorized"
        client.headers.update(auth)

        # An HTML upload is served as HTML, but sandboxed: its script cannot act as this site.
        html = upload(client, Path("page.html"), data=HOSTILE)
        r = client.get(f"/v1/documents/{html['id']}/file")
        assert r.status_code == 200 and r.content == HOSTILE
        assert r.headers["content-type"].startswith("text/html; charset=")
        assert r.headers["content-security-policy"] == "sandbox"

        # Unknown ids, and ids that are not ids at all: 404 naming the problem; no path from the request.
        for bad in ("0123456789abcdef", "a%00b", "docqa.sqlite3"):
            r = client.get(f"/v1/documents/{bad}/file")
            assert r.status_code == 404 and r.json()["error"]["type"] == "document_not_found", (bad, r.text)
        r = client.get("/v1/documents/..%2F..%2Fdocqa.sqlite3/file")  # no route: a slash is no id
        assert r.status_code == 404 and r.json()["error"]["type"] == "not_found"

        # A stored upload that is gone: 409 that says to upload it again.
        (client.app.state.services.store.dir(html["id"]) / "upload.bin").unlink()
        r = client.get(f"/v1/documents/{html['id']}/file")
        assert r.status_code == 409 and r.json()["error"]["type"] == "document_failed"
        assert "upload it again" in r.json()["error"]["message"]


def test_a_part_gets_the_whole_file(server, cases):
    """pages=2-3 of a PDF: its page numbers are the file's own, so the whole file is served."""
    pdf_path = cases / "pdf/pypdf-resources/multilang.pdf"
    with server() as client:
        r = client.post("/v1/documents", files={"file": (pdf_path.name, pdf_path.read_bytes())}, data={"pages": "1"})
        assert r.status_code == 202, r.text
        doc = client.get(f"/v1/documents/{r.json()['id']}").json()
        assert doc["name"] == "multilang.pdf (pages 1-1)"
        r = client.get(f"/v1/documents/{doc['id']}/file")
        assert r.status_code == 200 and r.content == pdf_path.read_bytes()
        assert r.headers["content-disposition"].startswith('inline; filename="multilang.pdf"')


def test_parallel_reads_of_a_large_file_are_streamed_not_held(tmp_path, gemma_path):
    """8 parallel reads of a 40 MB upload on a real server process: the file is streamed from disk in
    chunks, so the server's memory grows by a few MB, not by 8 copies (before: each request read the
    whole file; 8 reads of a 50 MB PDF took a server from 591 MB to 1,025 MB). A read still in
    flight when the document is deleted completes from its open file."""
    import random
    import threading

    from testkit.live import Live
    from tests.ingest.samples import docx, paragraph

    big = random.Random(7).randbytes(40 * 1024**2)  # incompressible: the ZIP stays 40 MB
    data = docx(paragraph("The ledger of the harbour lists seven ships."), {"media/big.bin": big})
    server = Live(tmp_path / "data", gemma_path, DOCQA_N_CTX="2048").start()
    try:
        doc_id = server.ingest("ledger.docx", data)
        Path(f"/proc/{server.proc.pid}/clear_refs").write_text("5")  # reset the peak RSS (VmHWM)
        before = server.rss_kib()
        got: list[int] = []

        def read() -> None:
            c = server.conn(60)
            c.request("GET", f"/v1/documents/{doc_id}/file")
            r = c.getresponse()
            n = 0
            while chunk := r.read(256 * 1024):
                n += len(chunk)
            got.append(n)

        threads = [threading.Thread(target=read) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        peak = _peak_kib(server.proc.pid)
        print(f"8 parallel reads of {len(data) // 1024**2} MB: RSS {before // 1024} MB -> peak {peak // 1024} MB")
        assert got == [len(data)] * 8
        assert peak - before < 48 * 1024, (before, peak)

        c = server.conn(60)  # a read in flight when its document is deleted still ends complete
        c.request("GET", f"/v1/documents/{doc_id}/file")
        r = c.getresponse()
        first = r.read(64 * 1024)
        d = server.conn(10)
        d.request("DELETE", f"/v1/documents/{doc_id}")
        assert d.getresponse().status == 204
        assert len(first) + len(r.read()) == len(data)
    finally:
        server.stop()


def _peak_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM")
