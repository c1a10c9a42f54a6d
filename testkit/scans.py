"""Scanned pages made here, for the OCR tests and bench/ocr.py: text drawn onto a page image with
Pillow (DejaVu Sans, Debian's fonts-dejavu-core: Pillow's built-in font has no umlauts), wrapped
as an image-only PDF, so the text that OCR must find is known exactly.

``scan_page`` draws a page of ``inches`` (A4 by default; tests use the small ``CARD`` so that OCR
takes a fraction of a second) at ``dpi``, 11 pt text wrapped to the page's width (80 characters a
line on A4); ``noisy=True`` makes it look scanned: a slight rotation, speckle noise and JPEG
compression. ``scanned_pdf`` is one such
page per string; ``mixed_pdf`` interleaves text pages (a real text layer) with scanned ones, in
the order given.
"""

from __future__ import annotations

import io
import random
import textwrap
from collections.abc import Callable
from pathlib import Path

FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
A4_INCHES = (8.27, 11.69)
CARD = (4.0, 3.0)  # inches: about 40 characters a line, 8 lines; a tenth of an A4 page's pixels


def scan_page(text: str, dpi: int = 300, noisy: bool = False, seed: int = 0, inches: tuple[float, float] = A4_INCHES):
    """A grey-scale page image (PIL.Image, mode "L") of ``inches`` (width, height) with ``text`` on
    it: paragraphs separated by blank lines, wrapped to the width (margins 12 % of it). Raises
    FileNotFoundError when the font is missing (apt-get install fonts-dejavu-core)."""
    from PIL import Image, ImageDraw, ImageFilter, ImageFont

    if not FONT.exists():
        raise FileNotFoundError(f"{FONT} is missing: apt-get install fonts-dejavu-core")
    width, height = int(inches[0] * dpi), int(inches[1] * dpi)
    margin = 0.12 * inches[0]  # inches: 1 on A4
    chars = int((inches[0] - 2 * margin) * 72 / 5.6)  # DejaVu Sans at 11 pt: about 5.6 pt a character
    image = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(image)
    size = 11 * dpi / 72
    font = ImageFont.truetype(str(FONT), size)
    y = int(margin * dpi)
    for paragraph in text.split("\n\n"):
        for line in textwrap.wrap(" ".join(paragraph.split()), chars):
            draw.text((int(margin * dpi), y), line, fill=0, font=font)
            y += int(size * 1.4)
        y += int(size * 0.7)
    if not noisy:
        return image
    rng = random.Random(seed)
    image = image.rotate(rng.uniform(-0.8, 0.8), resample=Image.BICUBIC, fillcolor=255)
    image = image.filter(ImageFilter.GaussianBlur(0.6))
    pixels = image.load()
    for _ in range(width * height // 400):  # speckles: 0.25 % of the pixels
        x, yy = rng.randrange(width), rng.randrange(height)
        pixels[x, yy] = rng.choice((0, 90, 170))
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=60)
    return Image.open(io.BytesIO(out.getvalue()))


def scanned_pdf(
    pages: list[str], dpi: int = 300, noisy: bool = False, inches: tuple[float, float] = A4_INCHES
) -> bytes:
    """An image-only PDF (no text layer), one scanned page of ``inches`` per string of ``pages``, at ``dpi``."""
    images = [scan_page(text, dpi, noisy, seed=i, inches=inches) for i, text in enumerate(pages)]
    out = io.BytesIO()
    images[0].save(out, format="PDF", resolution=dpi, save_all=True, append_images=images[1:])
    return out.getvalue()


def card_pdf(pages: list[str], noisy: bool = False) -> bytes:
    """:func:`scanned_pdf` of small ``CARD`` pages at 300 dpi, as the tests use them."""
    return scanned_pdf(pages, noisy=noisy, inches=CARD)


def mixed_pdf(
    pages: list[tuple[str, str]],
    text_pdf: Callable[[list[str]], bytes],
    dpi: int = 300,
    inches: tuple[float, float] = A4_INCHES,
) -> bytes:
    """A PDF of ``pages``, each ``("text" | "scan", text)``: a page with a text layer (made by
    ``text_pdf``, which turns a list of page texts into a PDF), or a scanned one of ``inches``."""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    for kind, text in pages:
        data = text_pdf([text]) if kind == "text" else scanned_pdf([text], dpi, inches=inches)
        writer.add_page(PdfReader(io.BytesIO(data)).pages[0])
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()
