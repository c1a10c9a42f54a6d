"""Merged table cells (issue 51): a value that spans columns or rows given to every cell it covers
(what docqa does: ingest/pdf_tables.py and ingest/markup.py ``spread_spans``) against marking it as
spanning ("Europe (spans 4 columns)", the covered cells empty), measured by what the default model
answers about the covered cells.

Tables: the Google-Docs sample of ../shared/cases (``google-doc-document.pdf``: "Europe" and "EUR (€)"
span Germany to France), and two HTML tables as a DOCX's merged cells reach the text (mammoth writes
``colspan``/``rowspan``): a plan whose quarters and tasks span months, and a floor plan whose floor
spans its rooms' rows. Each rendering is uploaded as the text the model reads, and each question
asked once (greedy, quote-first answers as served by default); an answer is right when it holds the
expected word.

Run: ``python -m bench.spans`` (``--help``). Writes bench/results/spans.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from unittest import mock

from bench.quality import machine
from ingest import markup, pdf_tables
from ingest.extract import extract
from runtime.models import model_path
from runtime.system import system_info
from testkit.live import ROOT, Live

GOOGLE = (
    ROOT.parent / "shared" / "cases" / "pdf" / "sample-files" / "011-google-doc-document" / "google-doc-document.pdf"
)
PLAN = """<!DOCTYPE html><html><body><h1>Team plan 2026</h1><table>
<tr><th>Team</th><th colspan="3">Q1</th><th colspan="3">Q2</th></tr>
<tr><td></td><td>January</td><td>February</td><td>March</td><td>April</td><td>May</td><td>June</td></tr>
<tr><td>Operations</td><td colspan="2">server audit</td><td>holidays</td><td colspan="3">data centre move</td></tr>
<tr><td>Design</td><td>logo sketches</td><td colspan="3">website redesign</td><td colspan="2">print catalogue</td></tr>
</table></body></html>"""
FLOORS = """<!DOCTYPE html><html><body><h1>Office rooms</h1><table>
<tr><th>Floor</th><th>Room</th><th>Team</th></tr>
<tr><td rowspan="3">Third floor</td><td>301</td><td>Accounts</td></tr>
<tr><td>302</td><td>Legal</td></tr>
<tr><td>303</td><td>Payroll</td></tr>
<tr><td rowspan="2">Fourth floor</td><td>401</td><td>Research</td></tr>
<tr><td>402</td><td>Archive</td></tr>
</table></body></html>"""
CASES = [
    ("countries (PDF)", "pdf", [
        ("What is France's currency?", "EUR"), ("On which continent is Austria?", "Europe"),
        ("What currency is used in Austria?", "EUR"), ("On which continent is France?", "Europe"),
    ]),
    ("team plan (spans columns)", PLAN, [
        ("What does the Operations team do in February?", "audit"),
        ("What does the Operations team do in May?", "move"),
        ("What does the Design team do in March?", "website"),
    ]),
    ("rooms (spans rows)", FLOORS, [
        ("On which floor is room 303?", "Third"), ("On which floor is the Archive?", "Fourth"),
    ]),
]  # fmt: skip


def marked_pdf(table, rows):
    """The other rendering of pdf_tables.spread_spans: the spanning cell says so, the covered ones stay empty."""
    spread = SPREAD_PDF(table, rows)
    out = [list(r) for r in rows]
    for i, row in enumerate(rows):
        j = 0
        while j < len(row):
            if row[j] and j + 1 < len(row) and row[j + 1] is None and spread[i][j + 1] == row[j]:
                n = 1
                while j + n < len(row) and row[j + n] is None and spread[i][j + n] == row[j]:
                    n += 1
                out[i][j] = f"{row[j]} (spans {n} columns)"
                j += n
            else:
                j += 1
    return out


def marked_html(table) -> None:
    """The other rendering of markup.spread_spans: the spanning cell says so, the covered ones stay empty."""
    spanning = set()
    for cell in table.find_all(("td", "th")):
        width, height = markup._span(cell, "colspan"), markup._span(cell, "rowspan")
        notes = ([f"spans {width} columns"] if width > 1 else []) + ([f"spans {height} rows"] if height > 1 else [])
        if notes and cell.get_text(strip=True):
            cell.append(f" ({', '.join(notes)})")
            spanning.add(id(cell))
    SPREAD_HTML(table)  # a copy in each slot the cell covers: emptied, so that only the first says it
    for cell in table.find_all(("td", "th")):
        if id(cell) not in spanning and "(spans " in cell.get_text():
            cell.clear()


SPREAD_PDF, SPREAD_HTML = pdf_tables.spread_spans, markup.spread_spans


def rendered(source: str, how: str) -> str:
    """The text the model reads of ``source`` ("pdf": the Google-Docs sample; else HTML), with spans
    spread (``how`` "spread") or marked ("marked")."""
    patches = (
        [
            mock.patch.object(pdf_tables, "spread_spans", marked_pdf),
            mock.patch.object(markup, "spread_spans", marked_html),
        ]
        if how == "marked"
        else []
    )
    for p in patches:
        p.start()
    try:
        data = GOOGLE.read_bytes() if source == "pdf" else source.encode()
        return extract(data).text
    finally:
        for p in patches:
            p.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="qwen-coder-1.5b")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "spans")
    args = p.parse_args()
    path = model_path(args.model, Path(tempfile.gettempdir()) / "docqa-models")
    load0 = os.getloadavg()
    live = Live(Path(tempfile.mkdtemp(prefix="docqa-spans-")) / "data", path, DOCQA_N_THREADS=str(args.threads))
    live.start(timeout=900)
    rows, texts = [], {}
    try:
        for name, source, questions in CASES:
            for how in ("spread", "marked"):
                text = texts[name, how] = rendered(source, how)
                doc_id = live.ingest(f"{name} {how}.txt", text.encode())
                for question, expected in questions:
                    _, reply = live.post_json(
                        f"/v1/documents/{doc_id}/answers", {"question": question, "max_tokens": 48}
                    )
                    answer = reply.get("answer", "")
                    rows.append({"table": name, "rendering": how, "question": question, "expected": expected,
                                 "answer": answer, "right": expected.lower() in answer.lower()})  # fmt: skip
                    print(name, how, question, "->", answer.replace("\n", " ")[:100], flush=True)
    finally:
        live.stop()
    results = {"model": args.model, "rows": rows, "texts": {f"{k[0]} / {k[1]}": v for k, v in texts.items()},
               "machine": {**machine(), "load_before": load0, "load_after": os.getloadavg(),
                           "system_info": system_info()}}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=1, ensure_ascii=False))
    m = results["machine"]
    right = {how: sum(r["right"] for r in rows if r["rendering"] == how) for how in ("spread", "marked")}
    n = len(rows) // 2
    lines = [
        f"# Merged table cells: spread or marked ({args.model}, bench/spans.py)",
        "",
        f"{m['cpu']}, {m['cores']} cores, {args.threads} threads; load before/after {m['load_before']} / "
        f"{m['load_after']}; {m['system_info']}",
        "",
        f"Right answers: spread {right['spread']} of {n}, marked {right['marked']} of {n}.",
        "",
        "| table | rendering | question | expected | right | answer |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        answer = r["answer"].replace("\n", " ").replace("|", "\\|")[:120]
        lines.append(f"| {r['table']} | {r['rendering']} | {r['question']} | {r['expected']} | "
                     f"{'yes' if r['right'] else 'no'} | {answer} |")  # fmt: skip
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
