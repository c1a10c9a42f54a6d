"""PowerPoint decks (PPTX, python-pptx: https://github.com/scanny/python-pptx) as text: one page per
slide, in the deck's order, so a citation's page is the slide's number (ingest/locate.py adds "notes"
when it quotes the speaker notes).

A slide's page::

    ## Slide 3: Quarterly results

    - Revenue grew 12 %
      - in Europe most

    | Region | Q1 | Q2 |
    | --- | --- | --- |
    | EU | 4 | 5 |

    ### Notes

    Mention the new office.

The title comes first, then every other shape with text in reading order (top to bottom, then left
to right; grouped shapes inside their group), a paragraph's outline level as indented ``-`` items
(only where the deck has several levels or bullets), tables as pipe rows, then the notes. Pictures,
charts and media have no text here (a picture's alternative text is kept). A hidden slide keeps its
place and says so. The ZIP has passed ingest/containers.py ``check_container`` first.
"""

from __future__ import annotations

import io

from ingest.errors import UnreadableDocument
from ingest.sheets import cell_text

HEADING = "## Slide "  # ingest/locate.py: "## Slide <n>"
NOTES = "### Notes"  # ingest/locate.py: what follows is the slide's notes
MAX_SLIDES = 10_000  # as ingest/containers.py MAX_MEMBERS


def slide_pages(data: bytes) -> tuple[list[str], list[dict]]:
    """The text of each slide (one page per slide), and warnings for slides that could not be read
    (kept with their number only). Raises UnreadableDocument for a deck python-pptx cannot open."""
    from pptx import Presentation

    try:
        deck = Presentation(io.BytesIO(data))
        slides = list(deck.slides)[:MAX_SLIDES]
    except Exception as exc:  # python-pptx raises KeyError/ValueError/lxml errors for broken parts
        raise UnreadableDocument(
            f"the presentation could not be opened ({type(exc).__name__}: {exc}); open and re-save it"
        ) from exc
    pages, warnings = [], []
    for number, slide in enumerate(slides, 1):
        try:
            pages.append(_slide_text(number, slide))
        except Exception as exc:  # one broken slide (a missing part): the others are read
            warnings.append({"page": number, "message": f"slide {number} could not be read ({exc}); it is left empty"})
            pages.append(f"{HEADING}{number}")
    return pages, warnings


def _slide_text(number: int, slide) -> str:
    title_shape = slide.shapes.title
    title = " ".join(title_shape.text_frame.text.split()) if title_shape is not None else ""
    parts = [f"{HEADING}{number}: {title}" if title else f"{HEADING}{number}"]
    if slide._element.get("show") == "0":
        parts.append("(a hidden slide)")
    skip = title_shape.shape_id if title_shape is not None else None
    for shape in _in_reading_order(slide.shapes):
        if shape.shape_id == skip:
            continue
        block = _shape_text(shape)
        if block:
            parts.append(block)
    if slide.has_notes_slide:
        frame = slide.notes_slide.notes_text_frame
        notes = frame.text.strip() if frame is not None else ""
        if notes:
            parts += [NOTES, notes]
    return "\n\n".join(parts)


def _in_reading_order(shapes) -> list:
    """Shapes top to bottom, then left to right (a shape without a position last)."""
    far = 1 << 62
    return sorted(shapes, key=lambda s: (s.top if s.top is not None else far, s.left if s.left is not None else far))


def _shape_text(shape) -> str:
    from pptx.enum.shapes import MSO_SHAPE_TYPE

    if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
        return "\n\n".join(t for t in (_shape_text(s) for s in _in_reading_order(shape.shapes)) if t)
    if getattr(shape, "has_table", False) and shape.has_table:
        return _table(shape.table)
    if getattr(shape, "has_text_frame", False) and shape.has_text_frame:
        return _paragraphs(shape.text_frame.paragraphs)
    alt = shape._element.xpath("./*[1]/p:cNvPr/@descr") if shape.shape_type == MSO_SHAPE_TYPE.PICTURE else []
    return f"(picture: {' '.join(alt[0].split())})" if alt and alt[0].strip() else ""


def _paragraphs(paragraphs) -> str:
    items = [(p.level, " ".join(p.text.split())) for p in paragraphs]
    items = [(level, text) for level, text in items if text]
    if len(items) > 1 and any(level for level, _ in items):
        return "\n".join(f"{'  ' * level}- {text}" for level, text in items)
    return "\n".join(text for _, text in items)


def _table(table) -> str:
    rows = [[cell_text(cell.text) for cell in row.cells] for row in table.rows]
    rows = [r for r in rows if any(r)]
    if not rows:
        return ""
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + " --- |" * len(rows[0])]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows[1:]])
