"""OCR of PDF pages: a page rendered by PDFium (pypdfium2) to a grey-scale bitmap and read by
Tesseract's command-line program (Debian's ``tesseract-ocr`` and its language packs).

It runs in the extraction worker process (ingest/worker.py), so a page costs that process's memory
and time limits; the ``tesseract`` child inherits the address-space limit (RLIMIT_AS) and is killed
with the worker (PR_SET_PDEATHSIG), so a killed worker leaves no OCR running. Tesseract runs one
thread per page (``OMP_THREAD_LIMIT=1``): the workers already read files side by side.

Choices, measured in bench/results/ocr.md (bench/ocr.py): PDFium against Poppler's ``pdftoppm``,
the ``tesseract`` program fed the bitmap on stdin (a PGM: no image library, no temporary file)
against pytesseract and OCRmyPDF (the same engine, so the same words: they cost more time and more
dependencies), 300 dpi against 200 dpi, and ``|`` kept out of Tesseract's alphabet
(``tessedit_char_blacklist``): in sans-serif type it reads the capital I as a bar.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Literal

__all__ = ["MODES", "OcrFailed", "OcrSettings", "PageOcr", "install_command", "unavailable"]

MODES = ("auto", "off", "force")
DPI = 300  # Tesseract's documented optimum for body text; see bench/results/ocr.md for 200 dpi
MAX_PIXELS = 40_000_000  # a page larger than this at DPI (beyond A2) is rendered at a lower resolution
LANGUAGES = re.compile(r"[A-Za-z0-9_]+(?:\+[A-Za-z0-9_]+)*")
_TESSERACT_ARGS = ("-c", "tessedit_char_blacklist=|")


@dataclass(frozen=True, slots=True)
class OcrSettings:
    """How PDF pages are read by OCR (DOCQA_OCR, DOCQA_OCR_LANGUAGES, DOCQA_OCR_PAGE_TIMEOUT_S).

    ``mode``: ``auto`` reads by OCR only the pages without usable text (no text layer, a text layer
    that reads as garbage, or one that could not be read); ``force`` every page; ``off`` none.
    ``languages``: Tesseract language codes joined with ``+`` ("eng", "eng+deu").
    ``page_timeout_s``: seconds one page may take; the worker's time limit grows by this for each
    page it reads by OCR. Raises ValueError for an unknown mode or a malformed language list.
    """

    mode: Literal["auto", "off", "force"] = "off"
    languages: str = "eng"
    page_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"OCR mode {self.mode!r} is not one of {', '.join(MODES)}")
        if not LANGUAGES.fullmatch(self.languages):
            raise ValueError(f"OCR languages {self.languages!r}: write Tesseract codes joined with +, e.g. eng+deu")
        if self.page_timeout_s <= 0:
            raise ValueError("the OCR page timeout must be positive")


class OcrFailed(Exception):
    """Tesseract failed on one page (its exit status and last error line); the page is left empty."""


def install_command(languages: str, packs_only: bool = False) -> str:
    """The Debian command that installs Tesseract and the packs for ``languages`` ("eng+deu" ->
    ``apt-get install tesseract-ocr tesseract-ocr-deu``; English comes with tesseract-ocr), or
    with ``packs_only`` just the packs."""
    packs = [f"tesseract-ocr-{code.lower().replace('_', '-')}" for code in languages.split("+")]
    if not packs_only:
        packs = ["tesseract-ocr", *(p for p in packs if p != "tesseract-ocr-eng")]
    return " ".join(["apt-get install", *packs])


_AVAILABLE: set[tuple[str, str]] = set()  # (languages, PATH) found usable in this process


def unavailable(languages: str) -> str | None:
    """Why OCR in ``languages`` cannot run on this machine, with what to install; None when it can.
    Looks for ``tesseract`` on PATH and asks it for its language packs; a success is remembered
    (per PATH), a failure is looked at again next time (Tesseract may have been installed since)."""
    key = (languages, os.environ.get("PATH", ""))
    if key in _AVAILABLE:
        return None
    why = _unavailable(languages, key[1])
    if why is None:
        _AVAILABLE.add(key)
    return why


def _unavailable(languages: str, path: str) -> str | None:
    exe, install = shutil.which("tesseract", path=path), install_command(languages)
    if exe is None:
        return f"Tesseract is not installed on the server (no `tesseract` on its PATH); install it: {install}"
    try:
        listed = subprocess.run([exe, "--list-langs"], capture_output=True, timeout=30, env=_env()).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"Tesseract ({exe}) does not run ({type(exc).__name__}: {exc}); reinstall it: {install}"
    have = set(listed.decode(errors="replace").split()[1:])  # the first line is a heading
    missing = [code for code in languages.split("+") if code not in have]
    if missing:
        return (
            f"Tesseract has no language pack for {', '.join(missing)} (DOCQA_OCR_LANGUAGES={languages}); "
            f"install it: {install_command('+'.join(missing), packs_only=True)}"
        )
    return None


class PageOcr:
    """The pages of one PDF, opened once by PDFium, read one at a time. ``password``: for an
    encrypted PDF. Raises pypdfium2's PdfiumError when PDFium cannot open the file."""

    def __init__(self, data: bytes, password: str | None, settings: OcrSettings) -> None:
        import pypdfium2 as pdfium

        self.settings = settings
        self._doc = pdfium.PdfDocument(data, password=password)

    def __enter__(self) -> PageOcr:
        return self

    def __exit__(self, *exc: object) -> None:
        self._doc.close()

    def read(self, index: int) -> str:
        """The text Tesseract reads on page ``index`` (0-based), as it prints it (lines, blank lines
        between paragraphs). Raises OcrFailed, or PdfiumError when the page cannot be rendered."""
        pgm = self.render(index)
        try:
            done = subprocess.run(
                ["tesseract", "stdin", "stdout", "--dpi", str(DPI), "-l", self.settings.languages, *_TESSERACT_ARGS],
                input=pgm,
                capture_output=True,
                timeout=self.settings.page_timeout_s,
                env=_env(),
                preexec_fn=_die_with_parent,
            )
        except subprocess.TimeoutExpired as exc:
            raise OcrFailed(f"OCR took longer than {self.settings.page_timeout_s:.0f} s") from exc
        except OSError as exc:
            raise OcrFailed(f"tesseract did not start ({exc})") from exc
        if done.returncode != 0:
            last = (done.stderr.decode(errors="replace").strip().splitlines() or ["no message"])[-1]
            raise OcrFailed(f"tesseract exited with status {done.returncode}: {last[:200]}")
        return done.stdout.decode("utf-8", errors="replace")

    def render(self, index: int) -> bytes:
        """Page ``index`` as a binary PGM (P5, 8-bit grey) at DPI, or lower for a page over MAX_PIXELS."""
        page = self._doc[index]
        try:
            width, height = page.get_size()  # points
            scale = DPI / 72
            if width * height * scale * scale > MAX_PIXELS:
                scale = (MAX_PIXELS / (width * height)) ** 0.5
            bitmap = page.render(scale=scale, grayscale=True)
            try:
                w, h, stride = bitmap.width, bitmap.height, bitmap.stride
                raw = bytes(bitmap.buffer)
                if bitmap.n_channels != 1:  # grey-scale renders one channel; convert anything else
                    raw, stride = _to_grey(raw, w, h, stride, bitmap.n_channels), w
            finally:
                bitmap.close()
        finally:
            page.close()
        rows = raw if stride == w else b"".join(raw[y * stride : y * stride + w] for y in range(h))
        return b"P5\n%d %d\n255\n" % (w, h) + rows


def _to_grey(raw: bytes, w: int, h: int, stride: int, channels: int) -> bytes:
    """The first colour channel of each pixel (PDFium's BGR(x) with grey-scale rendering: B = G = R)."""
    return b"".join(raw[y * stride : y * stride + w * channels : channels] for y in range(h))


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_THREAD_LIMIT": "1"}


def _die_with_parent() -> None:
    """In the tesseract child: SIGKILL when the worker process dies (Linux prctl), so a worker killed
    for its time limit takes its OCR with it."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
