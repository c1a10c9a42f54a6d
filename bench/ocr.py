"""Issue 30 item 2: OCR of scanned PDF pages, its choices and its speed on this machine.

Scanned pages are made here (testkit/scans.py: text drawn with Pillow at 300 dpi, clean or
"noisy": rotated, blurred, speckled, JPEG), so the words OCR must find are known: English pages from
Alice in Wonderland (../shared/cases/text/gutenberg), German pages of a tenancy agreement (below).
Quality is word accuracy: the share of the reference words (lower-cased ``\\w+``) found in order
(difflib's matching blocks over the word lists), per page, averaged.

``candidates``: the ways to read a page, each on every page, interleaved page by page (the order
rotated each page) over ``--reps`` rounds, time per page single-threaded (Tesseract with
OMP_THREAD_LIMIT=1, as the worker runs it):
* ``pdfium+cli``: what docqa does (ingest/ocr.py PageOcr: PDFium's grey bitmap as a PGM on the
  ``tesseract`` program's stdin, ``|`` out of its alphabet, 300 dpi);
* ``pdfium+cli, | allowed``, ``pdfium+cli 200 dpi``: the same without one choice each;
* ``pdftoppm+cli``: Poppler renders instead (needs poppler-utils);
* ``pdfium+pytesseract``: pytesseract instead of the program (needs pytesseract and Pillow);
* ``ocrmypdf``: OCRmyPDF on the whole PDF, its text layer read by pypdf (needs ocrmypdf).
A candidate whose tools are missing is listed as not run. ``renderers``: rendering alone, PDFium
against pdftoppm, interleaved, median seconds a page.

``throughput``: the real extraction worker (ingest/worker.py, 1 GiB limit, OCR auto) on ``--files``
scanned 3-page PDFs, all submitted at once, with 1 worker and with 2 (the default): pages per second.

Usage: .venv/bin/python -m bench.ocr [candidates] [renderers] [throughput] [--reps 2] [--files 4]
       [--out bench/results/ocr.json]; writes the .json and a .md next to it. The load (uptime) and
       the CPU are recorded before and after.
"""

from __future__ import annotations

import argparse
import difflib
import io
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ingest.ocr import DPI, OcrSettings, PageOcr
from testkit.scans import scanned_pdf

ROOT = Path(__file__).resolve().parent.parent
ALICE = ROOT.parent / "shared/cases/text/gutenberg/alice-in-wonderland-pg11.txt"
GERMAN = """Der Mietvertrag beginnt am ersten März und läuft auf unbestimmte Zeit. Die Kündigungsfrist beträgt
drei Monate zum Ende eines Kalendermonats; sie muss schriftlich erklärt werden. Die Kaution in Höhe von drei
Monatsmieten wird auf einem gesonderten Konto angelegt und nach dem Auszug innerhalb von sechs Monaten
zurückgezahlt.

Der Mieter darf die Wohnung nur mit Zustimmung des Vermieters untervermieten. Kleintiere wie Fische, Vögel
und Hamster sind erlaubt; für Hunde und Katzen ist eine gesonderte Erlaubnis nötig. Schäden, die während der
Mietzeit entstehen, sind unverzüglich zu melden.

Die Nebenkosten werden jährlich abgerechnet. Zu ihnen gehören Heizung, Warmwasser, Müllabfuhr,
Straßenreinigung, Gartenpflege und die Beleuchtung des Treppenhauses. Eine Erhöhung der Vorauszahlung ist
nach einer Abrechnung möglich, wenn die tatsächlichen Kosten höher waren.

Schönheitsreparaturen übernimmt der Vermieter. Der Mieter hält die Fenster, Türen und Fußböden sauber und
lüftet regelmäßig, damit sich kein Schimmel bildet. Größere Veränderungen, etwa das Entfernen einer Wand oder
der Einbau einer Küche, bedürfen der Zustimmung beider Parteien.

Im Winter räumt der Hausmeister den Gehweg vor dem Haus. Die Hausordnung gilt als Bestandteil dieses
Vertrages; die Ruhezeiten dauern von zweiundzwanzig Uhr bis sechs Uhr und am Sonntag ganztägig. Fahrräder
werden im Keller abgestellt, nicht im Flur."""


def _paragraphs(text: str) -> list[str]:
    return [" ".join(p.split()) for p in text.split("\n\n") if p.strip()]


def _pages(paragraphs: list[str], n: int, chars: int = 2200) -> list[str]:
    pages, page = [], ""
    for p in paragraphs:
        if page and len(page) + len(p) > chars:
            pages.append(page.strip())
            page = ""
            if len(pages) == n:
                break
        page += p + "\n\n"
    return pages


def english_pages(n: int = 4) -> list[str]:
    alice = ALICE.read_text(encoding="utf-8-sig")
    return _pages([p for p in _paragraphs(alice) if len(p) > 200][20:], n)


def german_pages() -> list[str]:
    paras = _paragraphs(GERMAN)
    return ["\n\n".join(paras[:3]), "\n\n".join(paras[2:])]


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def accuracy(reference: str, read: str) -> float:
    """Share of the reference's words found in order in ``read``."""
    ref, got = words(reference), words(read)
    blocks = difflib.SequenceMatcher(a=ref, b=got, autojunk=False).get_matching_blocks()
    return sum(b.size for b in blocks) / len(ref)


# -- candidates: (data, page index, languages) -> text -----------------------------------------------


def _tesseract(image: bytes, languages: str, *extra: str) -> str:
    cmd = ["tesseract", "stdin", "stdout", "-l", languages, *extra]
    env = {**os.environ, "OMP_THREAD_LIMIT": "1"}
    return subprocess.run(cmd, input=image, capture_output=True, check=True, env=env).stdout.decode()


def docqa_page(dpi: int = DPI, blacklist: bool = True) -> Callable[[bytes, int, str], str]:
    import ingest.ocr as ocr

    def read(data: bytes, index: int, languages: str) -> str:
        with PageOcr(data, None, OcrSettings("auto", languages)) as pages:
            if dpi == DPI and blacklist:
                return pages.read(index)
            saved = ocr.DPI
            ocr.DPI = dpi
            try:
                pgm = pages.render(index)
            finally:
                ocr.DPI = saved
        extra = ("-c", "tessedit_char_blacklist=|") if blacklist else ()
        return _tesseract(pgm, languages, "--dpi", str(dpi), *extra)

    return read


def pdftoppm_page(data: bytes, index: int, languages: str) -> str:
    with tempfile.NamedTemporaryFile(suffix=".pdf") as f:
        f.write(data)
        f.flush()
        n = str(index + 1)
        pgm = subprocess.run(
            ["pdftoppm", "-f", n, "-l", n, "-r", str(DPI), "-gray", f.name], capture_output=True, check=True
        ).stdout
    return _tesseract(pgm, languages, "--dpi", str(DPI), "-c", "tessedit_char_blacklist=|")


def pytesseract_page(data: bytes, index: int, languages: str) -> str:
    import pytesseract
    from PIL import Image

    with PageOcr(data, None, OcrSettings("auto", languages)) as pages:
        image = Image.open(io.BytesIO(pages.render(index)))
    os.environ["OMP_THREAD_LIMIT"] = "1"
    return pytesseract.image_to_string(image, lang=languages, config="--dpi 300 -c tessedit_char_blacklist=|")


def ocrmypdf_pdf(data: bytes, languages: str) -> list[str]:
    """OCRmyPDF works on whole files: every page's text, read back from its output by pypdf."""
    import ocrmypdf
    from pypdf import PdfReader

    os.environ["OMP_THREAD_LIMIT"] = "1"
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp, "in.pdf"), Path(tmp, "out.pdf")
        src.write_bytes(data)
        ocrmypdf.ocr(src, dst, language=languages.split("+"), output_type="pdf", jobs=1, progress_bar=False, optimize=0)
        return [p.extract_text() for p in PdfReader(dst).pages]


def _available(name: str) -> str | None:
    """Why candidate ``name`` cannot run here, or None."""
    import importlib.util

    need = {"pdfium+pytesseract": ["pytesseract", "PIL"], "ocrmypdf": ["ocrmypdf"]}.get(name, [])
    if name == "pdftoppm+cli" and shutil.which("pdftoppm") is None:
        return "no pdftoppm (apt-get install poppler-utils)"
    missing = [m for m in need if importlib.util.find_spec(m) is None]
    return f"missing {', '.join(missing)}" if missing else None


CANDIDATES: dict[str, Callable | None] = {
    "pdfium+cli (docqa)": docqa_page(),
    "pdfium+cli, | allowed": docqa_page(blacklist=False),
    "pdfium+cli 200 dpi": docqa_page(dpi=200),
    "pdftoppm+cli": pdftoppm_page,
    "pdfium+pytesseract": pytesseract_page,
    "ocrmypdf": None,  # per file, not per page
}


def candidates(reps: int) -> dict:
    """Each candidate on every page, interleaved page by page (the order rotated each page), so a change
    of the machine's load in the run falls on all candidates alike; s/page per round."""
    sets = []
    for noisy in (False, True):
        for refs, lang in ((english_pages(), "eng"), (german_pages(), "deu")):
            sets.append({"noisy": noisy, "lang": lang, "refs": refs, "data": scanned_pdf(refs, noisy=noisy)})
    names = [n for n in CANDIDATES if _available(n) is None]
    results = {n: {"seconds": [], "acc": {}} for n in names}
    skipped = {n: _available(n) for n in CANDIDATES if n not in names}
    turn = 0
    for rep in range(reps):
        spent = dict.fromkeys(names, 0.0)
        pages = 0
        for s in sets:
            key = f"{s['lang']}{' noisy' if s['noisy'] else ''}"
            texts: dict[str, list[str]] = {n: [] for n in names}
            if "ocrmypdf" in names:  # per file, not per page
                t0 = time.perf_counter()
                texts["ocrmypdf"] = ocrmypdf_pdf(s["data"], s["lang"])
                spent["ocrmypdf"] += time.perf_counter() - t0
            per_page = [n for n in names if n != "ocrmypdf"]
            for i in range(len(s["refs"])):
                turn += 1
                for name in per_page[turn % len(per_page) :] + per_page[: turn % len(per_page)]:
                    t0 = time.perf_counter()
                    texts[name].append(CANDIDATES[name](s["data"], i, s["lang"]))
                    spent[name] += time.perf_counter() - t0
                pages += 1
            if rep == 0:  # the same words every round: one round of quality is enough
                for name in names:
                    results[name]["acc"][key] = [accuracy(r, t) for r, t in zip(s["refs"], texts[name], strict=True)]
        for name in names:
            results[name]["seconds"].append(spent[name] / pages)
            print(f"{name}: round {rep + 1}, {results[name]['seconds'][-1]:.2f} s/page", flush=True)
    return {"pages_per_round": sum(len(s["refs"]) for s in sets), "results": results, "not_run": skipped}


def renderers(reps: int) -> dict:
    """Rendering alone, PDFium in-process against pdftoppm (a process per page), interleaved: s/page."""
    data = scanned_pdf(english_pages())
    spent = {"pdfium": [], "pdftoppm": []}
    with tempfile.NamedTemporaryFile(suffix=".pdf") as f:
        f.write(data)
        f.flush()
        for _ in range(reps):
            for i in range(4):
                t0 = time.perf_counter()
                with PageOcr(data, None, OcrSettings("auto")) as pages:
                    pages.render(i)
                spent["pdfium"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                n = str(i + 1)
                subprocess.run(["pdftoppm", "-f", n, "-l", n, "-r", str(DPI), "-gray", f.name], capture_output=True,
                               check=True)  # fmt: skip
                spent["pdftoppm"].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in spent.items()}


def throughput(files: int) -> dict:
    from ingest.worker import ExtractionWorker

    refs = english_pages(3)
    pdfs = [scanned_pdf(refs, noisy=bool(i % 2)) for i in range(files)]
    out = {}
    for workers in (1, 2):
        worker = ExtractionWorker(
            timeout_s=120, memory_bytes=1024**3, workers=workers, queue=files, ocr=OcrSettings("auto", "eng")
        )
        worker.prestart()
        try:
            for w in worker._idle:
                w.ready.result(timeout=60)
            t0 = time.perf_counter()
            with ThreadPoolExecutor(files) as pool:
                got = list(pool.map(worker.extract, pdfs))
            seconds = time.perf_counter() - t0
        finally:
            worker.close()
        pages = sum(len(g.ocr_pages) for g in got)
        out[workers] = {"pages": pages, "seconds": seconds, "pages_per_s": pages / seconds}
        print(f"{workers} worker(s): {pages} pages in {seconds:.1f} s", flush=True)
    return out


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())  # fmt: skip
    tess = subprocess.run(["tesseract", "--version"], capture_output=True, text=True).stdout.splitlines()[:1]
    return {"cpu": cpu, "cores": os.cpu_count(), "tesseract": tess[0] if tess else None, "load": os.getloadavg()}


def _machine_line(part: dict) -> str:
    m0, m1 = part["machine_before"], part["machine_after"]
    return (
        f"{m0['cpu']}, {m0['cores']} cores, {m0['tesseract']}; load average (1, 5, 15 min) "
        f"{', '.join(f'{x:.1f}' for x in m0['load'])} before, {', '.join(f'{x:.1f}' for x in m1['load'])} after."
    )


def report(data: dict) -> str:
    lines = ["# OCR of scanned PDF pages (bench/ocr.py)", ""]
    if "candidates" in data:
        c = data["candidates"]["result"]
        lines += [
            f"## Candidates ({c['pages_per_round']} A4 pages a round, interleaved page by page, single-threaded; "
            f"seconds a page: median of "
            f"{len(next(iter(c['results'].values()))['seconds'])} rounds)",
            "",
            _machine_line(data["candidates"]),
            "",
            "| candidate | s/page | word accuracy: eng | deu | eng noisy | deu noisy | worst page |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, r in c["results"].items():
            acc = r["acc"]
            cells = [f"{statistics.mean(acc[k]):.3f}" for k in ("eng", "deu", "eng noisy", "deu noisy")]
            worst = min(min(v) for v in acc.values())
            label = name.replace("|", "\\|")
            lines.append(f"| {label} | {statistics.median(r['seconds']):.2f} | {' | '.join(cells)} | {worst:.3f} |")
        for name, why in c["not_run"].items():
            lines.append(f"| {name} | not run: {why} | | | | | |")
        lines.append("")
    if "renderers" in data:
        r = data["renderers"]["result"]
        lines += ["## Rendering alone (A4 at 300 dpi, grey; median seconds a page)", ""]
        lines += [_machine_line(data["renderers"]), ""]
        lines += ["| renderer | s/page |", "|---|---|"] + [f"| {k} | {v:.3f} |" for k, v in r.items()] + [""]
    if "throughput" in data:
        t = data["throughput"]["result"]
        lines += ["## Throughput of the extraction worker (OCR auto, eng, 3-page scans submitted at once)", ""]
        lines += [_machine_line(data["throughput"]), ""]
        lines += ["| workers | pages | seconds | pages/s |", "|---|---|---|---|"]
        for w, r in t.items():
            lines.append(f"| {w} | {r['pages']} | {r['seconds']:.1f} | {r['pages_per_s']:.2f} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="*", default=["candidates", "renderers", "throughput"])
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/ocr.json")
    args = parser.parse_args()
    data: dict = json.loads(args.out.read_text()) if args.out.exists() else {}  # the parts not run now are kept
    for part in args.parts:
        before = machine()
        run = {"candidates": candidates, "renderers": renderers}.get(part)
        result = run(args.reps) if run is not None else throughput(args.files)
        data[part] = {"machine_before": before, "result": result, "machine_after": machine()}
    args.out.write_text(json.dumps(data, indent=1))
    args.out.with_suffix(".md").write_text(report(data))
    print(report(data))


if __name__ == "__main__":
    main()
