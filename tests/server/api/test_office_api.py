"""Spreadsheets and slide decks end to end on the embedded model (issue 38): an XLSX question is answered
with a citation naming its sheet and cell, a PPTX one naming its slide (and its notes)."""

from __future__ import annotations

import pytest

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


@pytest.mark.slow
def test_the_annual_total_a_script_wrote_as_a_formula_is_answered(server, tmp_path, reader_model):
    """Issue 51 on the default model: an openpyxl-written budget whose annual totals are =SUM formulas
    without saved values; "What is the annual total budget for Cloud hosting?" got the Q1 figure while
    those cells read as empty, and gets the computed sum now, citing its cell."""
    rows = [["Item", "Q1", "Q2", "Q3", "Q4", "Annual total"], ["Cloud hosting", 1200, 1350, 1425, 1580]]
    rows += [["Laptops", 4000, 0, 2500, 0], ["Training", 300, 450, 300, 450]]
    data = xlsx({"Budget 2025": rows}, {("Budget 2025", f"F{r}"): f"=SUM(B{r}:E{r})" for r in (2, 3, 4)})
    with server(model_path=reader_model("qwen-coder-1.5b"), n_ctx=4096) as client:
        doc = upload(client, None, "budget.xlsx", data)
        text = client.get(f"/v1/documents/{doc['id']}/text").json()["text"]
        assert doc["status"] == "ready" and "| 2 | Cloud hosting | 1200 | 1350 | 1425 | 1580 | 5555 |" in text
        body = {"question": "What is the annual total budget for Cloud hosting?", "max_tokens": 64}
        r = client.post(f"/v1/documents/{doc['id']}/answers", json=body)
        assert r.status_code == 200 and "5555" in r.json()["answer"].replace(",", ""), r.json()
