"""The embedded reader models give real answers (issue 26): facts planted in a ~2k-token text, and a
refusal for a question the document does not answer. Slow: each model prefills the documents on the CPU
(the 1.5B at about 38 tok/s on 2 idle cores). The documents are bench/quality.py's (seed 26), and the
bars are what bench/results/quality.md measured, less one."""

from __future__ import annotations

import pytest

from bench.quality_sets import build
from bench.score import is_refusal, score
from tests.conftest import upload, wait_ready

# (model, fewest of 5 needles right, must refuse): measured 5/5 and a refusal (1.5B), 4/5 and no
# refusal on the 10-page PDF (0.5B), so only the 0.5B's needles are asserted.
READERS = [("qwen-coder-1.5b", 4, True), ("qwen-coder-0.5b", 3, False)]


@pytest.fixture(scope="module")
def docs(cases):
    """bench/quality.py's documents of its results run (seed 26), by id."""
    return {d.doc_id: d for d in build(26, {"needles-2k": 2000, "long": 8000}, ["leval-quality-1"])}


def ask(client, doc_id: str, question: str) -> str:
    r = client.post(f"/v1/documents/{doc_id}/answers", json={"question": question, "max_tokens": 48})
    assert r.status_code == 200, r.text
    return r.json()["answer"]


@pytest.mark.slow
@pytest.mark.parametrize("name, least, refuses", READERS)
def test_reader_model_finds_needles_and_refuses(server, tmp_path, docs, name, least, refuses, reader_model):
    path = reader_model(name)
    needles, pdf = docs["needles-2k"], docs["pdf10"]
    with server(model_path=path) as client:
        doc = upload(client, tmp_path / "n.txt", name="needles.txt", data=needles.text.encode())
        answers = [(item, ask(client, doc["id"], item.question)) for item in needles.items if item.kind == "exact"]
        right = [item.qid for item, answer in answers if score(item, answer)["right"]]
        assert len(right) >= least, answers
        if refuses:  # the 10-page PDF: the fact on page 7, and a question it does not answer
            doc = upload(client, tmp_path / "ten-pages.pdf", data=pdf.data)
            fact, absent = pdf.items
            assert score(fact, ask(client, doc["id"], fact.question))["right"]
            answer = ask(client, doc["id"], absent.question)
            assert is_refusal(answer), answer


PLANTED = [  # (depth, sentence, question, the answer's words)
    (0.1, "The keeper of the Falsel lighthouse counted 313 ships in a single night.",
     "How many ships did the keeper of the Falsel lighthouse count in a single night?", ["313"]),
    (0.3, "The head gardener of Noxfal Hall was Drami Drabriru.", "Who was the head gardener of Noxfal Hall?",
     ["Drabriru"]),
    (0.5, "The locker of the Kazen rowing club opens with the code TD-7948.",
     "What code opens the locker of the Kazen rowing club?", ["7948"]),
    (0.7, "The bridge at Vento Ford was opened on 14 March 1788.", "On what date was the bridge at Vento Ford opened?",
     ["14", "March", "1788"]),
    (0.9, "The first map of the Kami valley was drawn by Venlo Rubrilo.", "Who drew the first map of the Kami valley?",
     ["Rubrilo"]),
]  # fmt: skip


@pytest.mark.slow
def test_quote_first_answers_planted_facts_with_verified_quotes_and_refuses_the_dog(
    server, tmp_path, cases, reader_model
):
    """Issue 34's planted-fact text on the default model: a ~6k-token Alice excerpt with five invented
    facts; each is answered with a verified quote that holds it, and the question about a dog the text
    never mentions (it has a cat, Dinah) is refused."""
    from bench.quality_sets import _plant

    alice = (cases / "text/gutenberg/alice-in-wonderland-pg11.txt").read_text(encoding="utf-8")
    start = max(alice.find("CHAPTER I."), 0)  # the book's first chapter (some copies start with its text)
    text = _plant(alice[start : start + 24_000], [(d, s) for d, s, _, _ in PLANTED])
    with server(model_path=reader_model("qwen-coder-1.5b"), n_ctx=8192, answer_mode="quote") as client:
        r = client.post("/v1/documents", files={"file": ("alice-planted.txt", text.encode())})
        assert r.status_code in (200, 202), r.text
        doc = wait_ready(client, r.json()["id"], timeout=900)  # ~6k tokens: 2-3 min on 2 idle cores
        stored = client.get(f"/v1/documents/{doc['id']}/text").json()["text"]
        for _, _, question, words in PLANTED:
            r = client.post(f"/v1/documents/{doc['id']}/answers", json={"question": question, "mode": "quote"})
            body = r.json()
            assert r.status_code == 200 and all(w in body["answer"] for w in words), body
            quote = body["quote"]
            assert quote["verified"] and all(w in quote["text"] for w in words), body
            (cited,) = body["citations"]
            assert cited["verified"] and cited["source"] == "quote"
            assert stored[cited["start"] : cited["end"]] == cited["text"] == quote["text"]
        r = client.post(
            f"/v1/documents/{doc['id']}/answers",
            json={"question": "What is the name of the lighthouse keeper's dog in this text?", "mode": "quote"},
        )
        assert is_refusal(r.json()["answer"]) and r.json()["citations"] == [], r.json()


def _contracts_xlsx() -> bytes:
    """A vendor-contracts workbook of the kind a new user asked about: a header row, one row a contract."""
    import io

    from openpyxl import Workbook

    wb = Workbook()
    ws = wb.active
    ws.title = "Contracts 2025"
    ws.append(["Vendor", "Service", "Start", "End", "Monthly cost (EUR)", "Contact", "Notice period"])
    ws.append(["Alpenblick Reinigung KG", "Office cleaning", "2024-01-01", "2026-12-31", 1240,
               "m.huber@alpenblick.example", "6 months"])  # fmt: skip
    ws.append(["Nordwind Hosting GmbH", "Cloud hosting", "2023-03-01", "2026-02-28", 3950, "j.krause@nordwind.example",
               "3 months"])  # fmt: skip
    out = io.BytesIO()
    wb.save(out)
    return out.getvalue()


def _quoted(client, doc_id: str, question: str) -> dict:
    r = client.post(f"/v1/documents/{doc_id}/answers", json={"question": question, "mode": "quote", "max_tokens": 48})
    assert r.status_code == 200, r.text
    return r.json()


GEOTOPO = "pdf/sample-files/009-pdflatex-geotopo/GeoTopo-komprimiert.pdf"


def _geotopo(client, cases) -> dict:
    """The German lecture notes' first 9 pages (about 4k tokens), read."""
    data = (cases / GEOTOPO).read_bytes()
    r = client.post("/v1/documents", files={"file": ("geotopo.pdf", data)}, data={"pages": "1-9"})
    assert r.status_code in (200, 202), r.text
    return wait_ready(client, r.json()["id"], timeout=1200)


@pytest.mark.slow
def test_quote_first_reads_a_table_row_through_its_header_and_a_german_passage_asked_in_english(
    server, tmp_path, cases, reader_model
):
    """Issue 48: the new user's spreadsheet row ("| 2 | Nordwind Hosting GmbH | ... | 2026-02-28 | ...")
    was refused because the words of the question are in the header row; a German passage was refused
    to an English question. Each is answered now, with the passage the model judged to answer it as the
    citation."""
    with server(model_path=reader_model("qwen-coder-1.5b"), n_ctx=8192, answer_mode="quote") as client:
        sheet = upload(client, tmp_path / "c.xlsx", name="contracts.xlsx", data=_contracts_xlsx())
        body = _quoted(client, sheet["id"], "When does the contract with Nordwind Hosting GmbH end?")
        assert "2026" in body["answer"] and "28" in body["answer"] and body["quote"]["verified"], body
        assert "Nordwind" in body["quote"]["text"] and body["citations"][0]["where"], body
        doc = _geotopo(client, cases)
        body = _quoted(client, doc["id"], "How much does the printed A5 version of the script cost?")
        assert "10" in body["answer"] and body["quote"]["verified"], body
        assert "10 Euro" in body["quote"]["text"], body


@pytest.mark.slow
@pytest.mark.xfail(
    reason="issue 48, not met yet: the default model judges the German passage with the price at 0.52 for the "
    "German question (threshold 0.65; real-b, bench/results/quality.md)",
    strict=False,
)
def test_quote_first_answers_a_german_question_about_a_german_passage(server, cases, reader_model):
    """Issue 48: the German question about the German notes' price was refused."""
    with server(model_path=reader_model("qwen-coder-1.5b"), n_ctx=8192, answer_mode="quote") as client:
        doc = _geotopo(client, cases)
        body = _quoted(client, doc["id"], "Wie viel kostet die gedruckte A5-Version des Skripts?")
        assert "10" in body["answer"] and body["quote"]["verified"], body
        assert "10 Euro" in body["quote"]["text"], body


@pytest.mark.slow
def test_quote_first_cites_the_sentence_under_a_heading_not_the_heading(server, reader_model):
    """The README's sample, in the new-user trial: "How long does the crossing to Morrow take?" was
    answered "35 minutes" with the heading "# The ferry to Morrow" as its verified quote. A heading is no
    passage of its own, and a sentence is read after its section's heading (spec/quote.py)."""
    from pathlib import Path

    guide = Path(__file__).resolve().parents[3] / "samples" / "harbour-guide.docx"
    with server(model_path=reader_model("qwen-coder-1.5b"), n_ctx=4096, answer_mode="quote") as client:
        doc = upload(client, guide)
        body = _quoted(client, doc["id"], "How long does the crossing to Morrow take?")
        assert "35" in body["answer"] and body["quote"]["verified"], body
        assert "35 minutes" in body["quote"]["text"] and not body["quote"]["text"].startswith("#"), body
