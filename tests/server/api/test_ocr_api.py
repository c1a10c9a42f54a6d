"""Issue 30 item 2 end to end: a scanned PDF uploaded to a real server process (``python -m server``,
DOCQA_OCR at its default, auto) is read by OCR in the extraction worker and becomes ready; its text
holds the scanned words on the right pages and its warnings say which pages OCR read. Without
Tesseract a scan gets 422 naming the install command, and a text PDF is served as before."""

from __future__ import annotations

import bisect

from ingest.pdf import OCR_NOTE
from server.service.background import NOTE
from testkit.live import Live
from testkit.scans import CARD, card_pdf, mixed_pdf
from tests.conftest import upload, wait_ready
from tests.ingest.samples import pdf

ENGLISH = "The harbour master counted seven ships before the storm."
GERMAN = "Die Kündigungsfrist beträgt drei Monate zum Monatsende."


def test_a_scanned_pdf_becomes_ready_with_its_words(tmp_path, gemma_path, tesseract):
    data = mixed_pdf([("text", "Typed page one."), ("scan", ENGLISH), ("scan", GERMAN)], pdf, inches=CARD)
    env = {"DOCQA_SELFTEST": "false", "DOCQA_N_CTX": "2048", "DOCQA_OCR_LANGUAGES": tesseract}
    server = Live(tmp_path / "data", gemma_path, **env).start(timeout=300)  # start-up calibrates: slow under load
    try:
        status, created = server.upload("scan.pdf", data)
        assert status == 202, created
        doc = server.wait_ready(created["id"])
        assert doc["status"] == "ready" and doc["pages"] == 3, doc
        assert doc["warnings"] == [{"page": 2, "message": OCR_NOTE}, {"page": 3, "message": OCR_NOTE}]
        status, body = server.get(f"/v1/documents/{doc['id']}/text")
        assert status == 200
        text, starts = body["text"], [p["start"] for p in body["pages"]]
        for words, page in (("Typed page one", 1), ("seven ships before the storm", 2), ("Kündigungsfrist beträgt", 3)):
            assert words in text, text
            assert bisect.bisect_right(starts, text.index(words)) == page
    finally:
        server.stop()


def test_without_tesseract_a_scan_gets_422_with_the_install_command(server, scans, tmp_path, monkeypatch):
    """The extraction workers start with a PATH that has no ``tesseract`` (as on a machine without it)."""
    monkeypatch.setenv("PATH", str(tmp_path))
    with server(ocr_languages="eng+deu", selftest=False) as client:
        r = client.post("/v1/documents", files={"file": ("scan.pdf", card_pdf(["A scanned page."]))})
        assert r.status_code == 422, r.text
        err = r.json()["error"]
        assert err["type"] == "ocr_unavailable"
        assert "apt-get install tesseract-ocr tesseract-ocr-deu" in err["message"]
        assert client.get("/v1/documents").json()["documents"] == []
        doc = upload(client, tmp_path / "typed.pdf", data=pdf(["A typed page is read as before."]))
        assert doc["status"] == "ready" and doc["warnings"] == []


def test_a_scan_gets_its_202_when_ocr_starts_and_is_read_in_the_background(server, tesseract):
    """Issue 37: OCR ran inside the upload request (the 202 for a 30-page scan came after 54 s, with
    no id and no progress meanwhile). The 202 now comes once OCR has read the first page: the row is there before its
    text (no tokens yet), its progress is OCR's pages, and it becomes ready by itself
    (server/service/background.py)."""
    data = card_pdf([ENGLISH, GERMAN, "A third page was scanned as well."])
    with server(ocr_languages=tesseract, selftest=False, n_ctx=2048) as client:
        r = client.post("/v1/documents", files={"file": ("scan.pdf", data)})
        assert r.status_code == 202, r.text
        created = r.json()
        assert created["status"] == "ingesting" and created["note"] == NOTE, created
        early = client.get(f"/v1/documents/{created['id']}").json()
        assert early["status"] == "ingesting" and early["tokens"] == 0 and early["progress"] < 1, early
        assert early["name"] == "scan.pdf"
        doc = wait_ready(client, created["id"], timeout=300)
        assert doc["status"] == "ready" and doc["pages"] == 3 and doc["tokens"] > 0, doc
        assert "seven ships" in client.get(f"/v1/documents/{doc['id']}/text").json()["text"]
        again = client.post("/v1/documents", files={"file": ("scan.pdf", data)})
        assert again.status_code == 200 and again.json()["id"] == doc["id"], again.text
