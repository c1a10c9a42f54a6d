"""Tables in PDFs (issue 29 item 9): pypdf's layout mode against pdfplumber's table finder, on every
readable PDF of ../shared/cases. Writes bench/results/pdf-tables.md.

Per page: the time of pypdf's plain ``extract_text()`` (what ingest/pdf.py always runs), of
``extract_text(extraction_mode="layout")``, of the ruling-line check (ingest/pdf_tables.py
``may_have_table``), and of pdfplumber's ``find_tables()`` (opening included, on every page, to show
what running it everywhere would cost and whether it finds tables where there are none). Then, per
case, whether the page text is unchanged by each way, and on the Google-Docs page whether the rows
survive. Run: ``.venv/bin/python -m bench.pdf_tables`` (a minute or two).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import platform
import subprocess
import time
from pathlib import Path

from pypdf import PdfReader

import ingest.pdf as pdf_module
from ingest.extract import extract
from ingest.pdf import pdf_pages
from ingest.pdf_tables import PageTables, may_have_table, splice_tables

CASES = Path(__file__).resolve().parents[1].parent / "shared" / "cases"
OUT = Path(__file__).resolve().parent / "results" / "pdf-tables.md"
GOOGLE = "pdf/sample-files/011-google-doc-document/google-doc-document.pdf"
ROW = "| Capital | Jakarta | Berlin | Vienna | Paris | Vatican City |"


SUMMARY = [
    "## The choice",
    "",
    "pdfplumber's table finder, spliced into pypdf's text (ingest/pdf_tables.py), over pypdf's layout mode:",
    "layout mode changes the text of nearly every page without a table (padding; it interleaves the two",
    "columns of multicolumn.pdf, manifest PDF-04), and on the Google-Docs table it merges the header row",
    "and leaves merged and empty cells as runs of spaces, so rows are not recoverable. Text outside tables",
    "stays pypdf's own (tests/ingest/test_pdf_tables.py compares whole PDFs without tables).",
    "The grid check keeps pdfplumber (3x pypdf's time on every page) to pages that draw a grid",
    "without curves; it skipped no page where",
    "pdfplumber finds a table of the kept kind. Costs to plan with: ~1 ms a page for the check, and on a",
    "page that passes it, pdfplumber's parse of that page (here 0.1-0.4 s).",
]


def _best(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


@contextlib.contextmanager
def _tables_off():
    """ingest/pdf.py as before this change: no page passes the grid check (unmapped glyphs still go)."""
    saved = pdf_module.may_have_table
    pdf_module.may_have_table = lambda page: False
    try:
        yield
    finally:
        pdf_module.may_have_table = saved


def _plain(page) -> str:
    return page.extract_text()


def _layout(page) -> str:
    return page.extract_text(extraction_mode="layout")


def _fresh(data: bytes, read) -> None:
    """Open ``data`` anew (nothing cached, as ingest/pdf.py does) and ``read`` every page."""
    for page in PdfReader(io.BytesIO(data), strict=False).pages:
        read(page)


def _pdfs() -> list[Path]:
    out = []
    for path in sorted(CASES.rglob("*.pdf")):
        try:
            reader = PdfReader(path, strict=False)
            if reader.is_encrypted or not reader.pages:
                continue
            reader.pages[0].extract_text()
        except Exception:
            continue  # the broken-file cases: no page to time
        out.append(path)
    return out


def measure() -> tuple[list[dict], list[str]]:
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    rows, notes = [], []
    for path in _pdfs():
        data = path.read_bytes()
        pages = PdfReader(io.BytesIO(data), strict=False).pages
        n = len(pages)
        plain = _best(lambda d=data: _fresh(d, _plain), repeat=2)
        layout = _best(lambda d=data: _fresh(d, _layout), repeat=2)
        check = sum(_best(lambda p=p: may_have_table(p)) for p in pages)
        gated = [i for i, p in enumerate(pages) if may_have_table(p)]
        branch = _best(lambda d=data: pdf_pages(d, None), repeat=2)
        with _tables_off():
            off = _best(lambda d=data: pdf_pages(d, None), repeat=2)
        t = time.perf_counter()
        with PageTables(data, None) as finder:
            found = {i: finder.tables(i) for i in range(n)}
        plumber = time.perf_counter() - t
        tables = sum(len(v) for v in found.values())
        missed = [i for i, v in found.items() if v and i not in gated]
        same_plain = all(splice_tables(p, found[i]) == p.extract_text() for i, p in enumerate(pages) if not found[i])
        same_layout = all(
            p.extract_text(extraction_mode="layout") == p.extract_text() for i, p in enumerate(pages) if not found[i]
        )
        rows.append(
            {
                "file": str(path.relative_to(CASES)),
                "pages": n,
                "plain_ms": 1000 * plain / n,
                "layout_ms": 1000 * layout / n,
                "check_ms": 1000 * check / n,
                "plumber_ms": 1000 * plumber / n,
                "branch_ms": 1000 * branch / n,
                "off_ms": 1000 * off / n,
                "gated": len(gated),
                "tables": tables,
                "missed": len(missed),
                "nontable_same_spliced": same_plain,
                "nontable_same_layout": same_layout,
            }
        )
    google = (CASES / GOOGLE).read_bytes()
    page = PdfReader(io.BytesIO(google)).pages[0]
    lay = page.extract_text(extraction_mode="layout")
    row = next(x for x in lay.splitlines() if "Capital" in x)
    header = next(x for x in lay.splitlines() if "Indonesia" in x)
    notes.append(f"layout mode, Google-Docs table (a row of it): `{row}`")
    notes.append(f"layout mode, Google-Docs header row (merged, flags as private-use code points): `{header!a}`")
    text = extract(google).text
    notes.append(f"this branch, Google-Docs: the row `{ROW}` is in the text: {ROW in text}")
    return rows, notes


def write(rows: list[dict], notes: list[str]) -> None:
    cpu = subprocess.run(["sh", "-c", "lscpu | grep 'Model name'"], capture_output=True, text=True).stdout.strip()
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    n = sum(r["pages"] for r in rows)
    total = {
        k: sum(r[k] * r["pages"] for r in rows) / n
        for k in ("plain_ms", "layout_ms", "check_ms", "plumber_ms", "branch_ms", "off_ms")
    }
    lines = [
        "# Tables in PDFs (issue 29 item 9)",
        "",
        "Made by `bench/pdf_tables.py` on every readable PDF of ../shared/cases (ms per page; pypdf plain and",
        "layout and `pdf_pages` open the file anew, best of 2; the grid check best of 3; pdfplumber one pass).",
        f"CPU: {cpu.split(':', 1)[-1].strip() or platform.processor()}, {os.cpu_count()} cores;",
        f"load at the end: `{load}` (a shared machine: wall times are inflated, the ratios are the point).",
        "",
        "| file | pages | pypdf plain | pypdf layout | grid check | pdfplumber find_tables (every page) "
        "| ingest/pdf.py pdf_pages: tables off / on | pages past the check | tables kept | tables on pages the check "
        "skips | non-table pages unchanged: spliced / layout |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['file']} | {r['pages']} | {r['plain_ms']:.1f} | {r['layout_ms']:.1f} | {r['check_ms']:.2f} | "
            f"{r['plumber_ms']:.1f} | {r['off_ms']:.1f} / {r['branch_ms']:.1f} | "
            f"{r['gated']} | {r['tables']} | {r['missed']} | "
            f"{'yes' if r['nontable_same_spliced'] else 'NO'} / {'yes' if r['nontable_same_layout'] else 'no'} |"
        )
    lines.append(
        f"| **all pages (weighted)** | {n} | {total['plain_ms']:.1f} | {total['layout_ms']:.1f} | "
        f"{total['check_ms']:.2f} | {total['plumber_ms']:.1f} | {total['off_ms']:.1f} / {total['branch_ms']:.1f} | "
        f"{sum(r['gated'] for r in rows)} | "
        f"{sum(r['tables'] for r in rows)} | {sum(r['missed'] for r in rows)} | |"
    )
    lines += ["", *[f"* {n}" for n in notes], "", *SUMMARY, ""]
    OUT.write_text("\n".join(lines))


if __name__ == "__main__":
    write(*measure())
    print(OUT.read_text())
