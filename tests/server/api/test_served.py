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
        again = client.get(f"/v1/documents/{doc['id']}/file", headers={"If-None-Match": etag})
        assert again.status_code == 304 and again.content == b""
        assert client.head(f"/v1/documents/{doc['id']}/file").status_code == 200

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
        (client.app.state.store.dir(html["id"]) / "upload.bin").unlink()
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
