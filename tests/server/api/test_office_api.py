"""Spreadsheets and slide decks end to end on the embedded model (issue 38): an XLSX question is answered
with a citation naming its sheet and cell, a PPTX one naming its slide (and its notes)."""

from __future__ import annotations

from tests.conftest import upload, wait_ready
from tests.ingest.office_samples import pptx, xlsx

COPY = "Copy, word for word, the sentence that begins with "
LONG = "The warehouse in Leeds keeps the spare boiler parts on the second shelf from the left"


def _ask(client, doc_id: str, question: str) -> list[dict]:
    body = {"question": question, "max_tokens": 40, "draft_tokens": 16}  # lookup copies: cited spans
    r = client.post(f"/v1/documents/{doc_id}/answers", json=body)
    assert r.status_code == 200, r.text
    return r.json()["citations"]


def test_an_xlsx_answer_cites_its_sheet_and_cell(client):
    data = xlsx(
        {
            "Summary": [["Item", "Count"], ["boilers", 3], ["pumps", 7]],
            "Sheet2": [["Site", "Note"], ["York", "Closed on Mondays."], [], [], [], ["Leeds", LONG + "."]],
        }
    )
    doc = upload(client, None, "stock.xlsx", data)
    assert wait_ready(client, doc["id"])["status"] == "ready"
    info = client.get(f"/v1/documents/{doc['id']}").json()
    assert info["kind"] == "xlsx" and info["pages"] == 2
    citations = _ask(client, doc["id"], COPY + "'The warehouse in Leeds keeps the spare'")
    text = client.get(f"/v1/documents/{doc['id']}/text").json()["text"]
    assert text.index("| 6 | Leeds | The warehouse") > 0  # the row's number is the sheet's
    named = [c for c in citations if c["where"] and c["where"].startswith("Sheet2!")]
    assert any("B6" in c["where"] for c in named), citations
    assert all(c["page"] == 2 for c in named)


def test_a_pptx_answer_cites_its_slide_and_notes(client):
    data = pptx(
        [
            {"title": "Welcome", "bullets": [(0, "Coffee is in the kitchen")]},
            {"title": "Plans", "bullets": [(0, "Open a second office")], "notes": LONG + " and nowhere else."},
        ]
    )
    doc = upload(client, None, "deck.pptx", data)
    assert wait_ready(client, doc["id"])["status"] == "ready"
    citations = _ask(client, doc["id"], COPY + "'The warehouse in Leeds keeps the spare'")
    assert any(c["where"] == "slide 2 notes" and c["page"] == 2 for c in citations), citations
    served = client.get(f"/v1/documents/{doc['id']}/file")
    assert served.headers["content-type"].startswith("application/vnd.openxmlformats-officedocument.presentationml")
