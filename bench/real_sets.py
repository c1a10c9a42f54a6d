"""``real``: questions a new user asks about real documents (issue 34's check of refusals on ordinary
files, not only on planted facts): a short guide written for the quick start (samples/harbour-guide.docx),
and PDFs from ../shared/cases (a speech, a Google Docs export with a table, a LaTeX paper).

They are the questions of the new-user trials of issues 34 and 39 and their kind, phrased as people
phrase them: the thing asked about is often named outside the sentence that answers (a heading, the
sentence before, a table's header row), which planted facts never do. Each answerable question has
its value in the document; each absent one is about something the document nearly says (a named
place's phone number, a harbour master without a name). Scored as the other sets (bench/score.py).
"""

from __future__ import annotations

from bench.quality_sets import CASES, ROOT, Doc, Item

GUIDE = ROOT / "samples" / "harbour-guide.docx"
CRAZY = CASES / "pdf" / "pypdf-resources" / "crazyones.pdf"
GOOGLE = CASES / "pdf" / "sample-files" / "011-google-doc-document" / "google-doc-document.pdf"
COLUMNS = CASES / "pdf" / "sample-files" / "026-latex-multicolumn" / "multicolumn.pdf"

# (file, [(question, accepted spellings or None for "not in the document")])
QUESTIONS = [
    (GUIDE, [
        ("When was the lighthouse on Gull Point built?", [["1871"]]),
        ("Who was the last resident keeper of the Gull Point lighthouse?", [["Ada Thorne"]]),
        ("How far out to sea can the Gull Point light be seen?", [["18"]]),
        ("How many steps are there to the lantern gallery?", [["112"]]),
        ("How long does the ferry crossing to Morrow take?", [["35"]]),
        ("How much is a child's return ticket on the ferry to Morrow?", [["4 euros"], ["4"]]),
        ("What time does the first ferry to Morrow leave?", [["07:40"], ["7:40"]]),
        ("On which day is the harbour museum closed?", [["Monday"], ["Mondays"]]),
        ("What is the Tide Table best known for?", [["smoked mackerel"]]),
        ("What is the phone number of the harbour museum?", None),
        ("What is the name of the harbour master?", None),
        ("Who designed the lighthouse on Gull Point?", None),
    ]),
    (CRAZY, [
        ("When was The Crazy Ones written?", [["1998"]]),
        ("What do the crazy ones push forward?", [["human race"]]),
        ("Who wrote The Crazy Ones?", None),
    ]),
    (GOOGLE, [
        ("What was Austria's population?", [["8,935,112"], ["8935112"], ["8.935.112"]]),
        ("What is the capital of Germany in the table?", [["Berlin"]]),
        ("What currency does Germany use?", [["EUR"], ["euro"]]),
        ("What should you refuse in the face of ambiguity?", [["temptation to guess"]]),
        ("What is the population of Italy?", None),
    ]),
    (COLUMNS, [
        ("What is the date of the two-column document?", [["January 3, 2024"], ["2024"]]),
        ("Which university is the author of the two-column document from?", None),
    ]),
]  # fmt: skip


def real_docs() -> list[Doc]:
    """One Doc per file, its questions in :data:`QUESTIONS` order."""
    docs = []
    for path, questions in QUESTIONS:
        name = path.stem
        items = [
            Item(f"real-{name}-{i}", q, "exact", spellings[0][0], accept=spellings)
            if spellings is not None
            else Item(f"real-{name}-absent{i}", q, "refusal", "")
            for i, (q, spellings) in enumerate(questions)
        ]
        docs.append(Doc(f"real-{name}", "real", path.name, "", items, data=path.read_bytes()))
    return docs
