"""Documents longer than the context (issue 15) with DOCQA_LONG_DOCUMENTS=refuse (issue 18 made
segmenting them the default): the 413 names the largest leading part that fits,
that part is accepted with ``pages=`` / ``chars=``, and a part keeps its real page numbers in
``/text`` and in citations. Real books from ../shared/cases on the embedded model."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import wait_ready
from tests.ingest.samples import first_pages

GEOTOPO = "pdf/sample-files/009-pdflatex-geotopo/GeoTopo-komprimiert.pdf"  # 117 pages, ~57k tokens
AROUND = "text/gutenberg/around-the-world-in-80-days-pg103.txt"  # one page of ~86k tokens
QUOTE = "Quote the whole text of the document verbatim."
FILES = Path(__file__).resolve().parents[2] / "ingest" / "files"


def _post(client, path, data: bytes, **form):
    return client.post("/v1/documents", files={"file": (path.rsplit("/", 1)[-1], data)}, data=form)


@pytest.mark.slow  # one of the longest in make test (2 cores); its check stays in make test-slow
def test_a_long_pdf_is_offered_its_leading_pages_and_a_part_keeps_its_page_numbers(server, cases):
    data = (cases / GEOTOPO).read_bytes()
    with server(long_documents="refuse") as client:
        r = _post(client, GEOTOPO, data)
        assert r.status_code == 413
        error = r.json()["error"]
        first, last = error["fits"]["pages"]
        print(f"413: {error['message']}")
        assert first == 1 and last > 3 and error["estimated"] and error["limit"] == 7168
        assert f"upload it again with pages=1-{last}" in error["message"]

        r = _post(client, GEOTOPO, data, pages=f"1-{last}")
        assert r.status_code == 202, r.text
        doc = wait_ready(client, r.json()["id"])
        assert doc["status"] == "ready" and doc["pages"] == last and doc["tokens"] <= 7168
        # Printed i, ii, iii, 1, 2, ...: the part is named by its labels and its PDF pages.
        assert doc["name"] == f"GeoTopo-komprimiert.pdf (pages i-{last - 3}, PDF pages 1-{last})"

        r = _post(client, GEOTOPO, data, pages="5-9")
        part = wait_ready(client, r.json()["id"])
        text = client.get(f"/v1/documents/{part['id']}/text").json()
        assert [p["page"] for p in text["pages"]] == [5, 6, 7, 8, 9]
        # GeoTopo prints i, ii, iii, 1, 2, ...: the text view names PDF page 5 "Page 2 (PDF page 5)".
        assert [p["label"] for p in text["pages"]] == ["2", "3", "4", "5", "6"]
        # The same bytes with the same part are the same document; another part is another one.
        assert _post(client, GEOTOPO, data, pages="5-9").status_code == 200


def test_citations_of_a_part_name_its_pages_as_in_the_upload(server):
    """Chapter 2 of a two-chapter EPUB, uploaded alone: its text is page 2, and so are the citations."""
    with server(long_documents="refuse") as client:
        r = _post(client, "alice-ch1-2.epub", (FILES / "alice-ch1-2.epub").read_bytes(), pages="2")
        doc = wait_ready(client, r.json()["id"])
        assert doc["status"] == "ready" and doc["name"] == "alice-ch1-2.epub (pages 2-2)"
        pages = client.get(f"/v1/documents/{doc['id']}/text").json()["pages"]
        assert [(p["page"], p["label"]) for p in pages] == [(2, None)]  # no printed labels: none named
        body = {"question": QUOTE, "max_tokens": 48, "verify16": True}
        answer = client.post(f"/v1/documents/{doc['id']}/answers", json=body).json()
        pages = [(c["page"], c["page_end"]) for c in answer["citations"]]
        print(f"chapter 2 alone: {answer['answer'][:60]!r} cited on pages {pages}")
        assert pages and set(pages) == {(2, 2)}


@pytest.mark.slow  # ~30-70 s on 2 cores; keeps `make test` under 30 minutes
def test_a_long_text_is_offered_its_leading_characters(server, cases):
    data = (cases / AROUND).read_bytes()
    with server(long_documents="refuse") as client:
        r = _post(client, AROUND, data)
        assert r.status_code == 413
        start, end = r.json()["error"]["fits"]["chars"]
        assert start == 0 and 20_000 < end < 40_000
        r = _post(client, AROUND, data, chars=f"0-{end}")
        assert r.status_code == 202, r.text
        doc = wait_ready(client, r.json()["id"])
        assert doc["status"] == "ready" and doc["tokens"] <= 7168
        assert len(client.get(f"/v1/documents/{doc['id']}/text").json()["text"]) <= end


@pytest.mark.parametrize(
    "form, status, words",
    [
        ({"pages": "200-210"}, 422, "the document has 30 page"),
        (
            {"pages": "five"},
            422,
            "pages=five: the document has no page labelled 'five'; its pages are labelled 1–30 "
            "(it has no printed labels: write it as pages=1-30)",
        ),
        ({"pages": "1-3", "chars": "0-10"}, 422, "either pages or chars"),
    ],
)
def test_bad_parts_get_a_422_naming_the_problem(server, cases, form, status, words):
    # GeoTopo's first 30 pages: the whole book took 8 s to read for the page count.
    with server(long_documents="refuse") as client:
        r = _post(client, GEOTOPO, first_pages(cases / GEOTOPO, 30), **form)
        assert r.status_code == status and words in r.json()["error"]["message"], r.text


def test_at_the_trained_context_a_larger_n_ctx_is_not_suggested(server, cases):
    """DOCQA_N_CTX 32768 is the embedded model's trained context: the 413 for an ~86k-token book says
    to serve a longer-context model, not to raise DOCQA_N_CTX; /health shows both."""
    with server(n_ctx=32768, long_documents="refuse") as client:
        health = client.get("/health").json()
        assert health["n_ctx"] == health["n_ctx_train"] == 32768
        message = _post(client, AROUND, (cases / AROUND).read_bytes()).json()["error"]["message"]
        assert "larger DOCQA_N_CTX" not in message and "serve a model with a longer context" in message


def test_a_part_asked_for_by_printed_labels_is_named_by_them_and_its_pdf_pages():
    """The new-user trial: `--pages ii-3` of GeoTopo was named "(pages 2-6)", in PDF page numbers,
    while its citations say "p. ii (PDF p. 2)"."""
    from ingest.extract import ExtractedText
    from server.service.uploads import display_name

    labels = ["i", "ii", "iii", "1", "2", "3", "4"]
    part = ExtractedText("text", cut="pages=2-6", page_labels=labels)
    assert display_name("GeoTopo.pdf", part) == "GeoTopo.pdf (pages ii-3, PDF pages 2-6)"
    assert display_name("book.pdf", ExtractedText("text", cut="pages=2-6")) == "book.pdf (pages 2-6)"
    assert display_name("a/b.txt", ExtractedText("text", cut="chars=0-400")) == "b.txt (characters 0-400)"


def test_a_part_whose_reading_is_long_gets_its_202_at_once_and_is_read_in_the_background(server, cases, monkeypatch):
    """Issue 51: ``pages=1-4`` of the 117-page GeoTopo blocked 16.6 s before its 202, with no
    feedback (the whole file is read for its running headers before the part is cut). A part whose
    reading takes longer than PART_GRACE_S (0 here, to be sure it is) gets its 202 with a note, and
    becomes ready by itself; a bad part of a small file still gets its 4xx in the request."""
    from server.service import background

    monkeypatch.setattr(background, "PART_GRACE_S", 0.0)
    data = first_pages(cases / GEOTOPO, 12)
    with server(long_documents="refuse") as client:
        r = _post(client, GEOTOPO, data, pages="2-3")
        assert r.status_code == 202 and r.json()["note"] == background.PART_NOTE, r.text
        early = client.get(f"/v1/documents/{r.json()['id']}").json()
        assert early["status"] == "ingesting" and early["kind"] == "pdf", early
        doc = wait_ready(client, r.json()["id"])
        assert (
            doc["status"] == "ready" and doc["pages"] == 2 and doc["name"].startswith("GeoTopo-komprimiert.pdf (pages")
        )
        assert _post(client, GEOTOPO, data, pages="2-3").status_code == 200, "the same part is the same document"
        monkeypatch.setattr(background, "PART_GRACE_S", 60.0)
        bad = _post(client, "tiny.txt", b"Only one page of text here.\n", pages="5-9")
        assert bad.status_code in (400, 422), bad.text
