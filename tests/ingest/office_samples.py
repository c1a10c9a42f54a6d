"""Spreadsheets and slide decks made in the tests: XLSX by openpyxl (and by hand, for a sheet too big for
openpyxl to write quickly), ODS by hand (its content.xml as LibreOffice writes it, the parts a reader
needs), PPTX by python-pptx."""

from __future__ import annotations

import datetime as dt
import io
import zipfile
from xml.sax.saxutils import escape

from tests.ingest.samples import zip_of

ODS_NS = (
    'xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
    'xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0" '
    'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"'
)


def xlsx(sheets: dict[str, list[list[object]]], formulas: dict[tuple[str, str], str] | None = None) -> bytes:
    """A workbook with a sheet per item (rows from A1); ``formulas``: ``{(sheet, "B9"): "=SUM(B2:B8)"}``,
    written without a cached value, as any script writes them."""
    import openpyxl

    book = openpyxl.Workbook()
    book.remove(book.active)
    for name, rows in sheets.items():
        sheet = book.create_sheet(name)
        for row in rows:
            sheet.append(row)
    for (name, ref), formula in (formulas or {}).items():
        book[name][ref] = formula
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def big_xlsx(rows: int) -> bytes:
    """One sheet of ``rows`` rows (an id and a name), its XML written directly (openpyxl needs ~25 s for
    a million rows)."""
    body = "".join(
        f'<row r="{r}"><c r="A{r}"><v>{r}</v></c><c r="B{r}" t="inlineStr"><is><t>n{r}</t></is></c></row>'
        for r in range(1, rows + 1)
    )
    return raw_xlsx(body, sheet="Big")


def raw_xlsx(rows_xml: str, sheet: str = "S", dimension: str | None = None, strings: list[str] | None = None) -> bytes:
    """A workbook of one sheet whose ``<sheetData>`` is ``rows_xml`` as given (cells that openpyxl would
    not write: far apart, with a wrong ``<dimension ref>``, naming shared strings that do not exist),
    with ``strings`` as its shared strings."""
    main = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
    rel = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    rels = f'<Relationship Id="rId1" Type="{rel}/worksheet" Target="worksheets/sheet1.xml"/>'
    members = {
        "[Content_Types].xml": (
            '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
            '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
            '<Default Extension="xml" ContentType="application/xml"/>'
            '<Override PartName="/xl/workbook.xml" '
            'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/>'
            '<Override PartName="/xl/worksheets/sheet1.xml" '
            'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/></Types>'
        ),
        "_rels/.rels": (
            '<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
            f'<Relationship Id="r1" Type="{rel}/officeDocument" Target="xl/workbook.xml"/></Relationships>'
        ),
        "xl/workbook.xml": (
            f'<?xml version="1.0"?><workbook xmlns="{main}" xmlns:r="{rel}"><sheets>'
            f'<sheet name="{escape(sheet)}" sheetId="1" r:id="rId1"/></sheets></workbook>'
        ),
        "xl/worksheets/sheet1.xml": (
            f'<?xml version="1.0"?><worksheet xmlns="{main}">'
            + (f'<dimension ref="{dimension}"/>' if dimension else "")
            + f"<sheetData>{rows_xml}</sheetData></worksheet>"
        ),
    }
    if strings is not None:
        rels += f'<Relationship Id="rId2" Type="{rel}/sharedStrings" Target="sharedStrings.xml"/>'
        items = "".join(f"<si><t>{escape(s)}</t></si>" for s in strings)
        members["xl/sharedStrings.xml"] = f'<?xml version="1.0"?><sst xmlns="{main}">{items}</sst>'
    members["xl/_rels/workbook.xml.rels"] = (
        '<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
        f"{rels}</Relationships>"
    )
    return zip_of(members)


def _ods_cell(v: object) -> str:
    if v is None:
        return "<table:table-cell/>"
    if isinstance(v, int | float) and not isinstance(v, bool):
        value = f'office:value-type="float" office:value="{v}"'
    elif isinstance(v, dt.date):
        value = f'office:value-type="date" office:date-value="{v.isoformat()}"'
    else:
        value = 'office:value-type="string"'
    return f"<table:table-cell {value}><text:p>{escape(str(v))}</text:p></table:table-cell>"


def ods(sheets: dict[str, list[list[object]]]) -> bytes:
    """An OpenDocument spreadsheet with a table per item; None is an empty cell."""
    tables = []
    for name, rows in sheets.items():
        body = "".join("<table:table-row>" + "".join(map(_ods_cell, row)) + "</table:table-row>" for row in rows)
        tables.append(f'<table:table table:name="{escape(name)}">{body}</table:table>')
    content = (
        f'<?xml version="1.0" encoding="UTF-8"?><office:document-content {ODS_NS} office:version="1.2">'
        f"<office:body><office:spreadsheet>{''.join(tables)}</office:spreadsheet></office:body></office:document-content>"
    )
    manifest = (
        '<?xml version="1.0" encoding="UTF-8"?><manifest:manifest '
        'xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0" manifest:version="1.2">'
        '<manifest:file-entry manifest:full-path="/" '
        'manifest:media-type="application/vnd.oasis.opendocument.spreadsheet"/>'
        '<manifest:file-entry manifest:full-path="content.xml" manifest:media-type="text/xml"/></manifest:manifest>'
    )
    return zip_of(
        {
            "mimetype": "application/vnd.oasis.opendocument.spreadsheet",
            "content.xml": content,
            "META-INF/manifest.xml": manifest,
        }
    )


def pptx(slides: list[dict]) -> bytes:
    """A deck: each slide ``{"title", "bullets": [(level, text)], "table": [[...]], "notes", "hidden"}``."""
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    for spec in slides:
        slide = deck.slides.add_slide(deck.slide_layouts[1 if spec.get("bullets") else 5])
        slide.shapes.title.text = spec.get("title", "")
        if spec.get("bullets"):
            frame = slide.placeholders[1].text_frame
            for i, (level, text) in enumerate(spec["bullets"]):
                para = frame.paragraphs[0] if i == 0 else frame.add_paragraph()
                para.text, para.level = text, level
        if spec.get("table"):
            rows = spec["table"]
            shape = slide.shapes.add_table(len(rows), len(rows[0]), Inches(1), Inches(4), Inches(6), Inches(1.5))
            for r, row in enumerate(rows):
                for c, value in enumerate(row):
                    shape.table.cell(r, c).text = str(value)
        if spec.get("notes"):
            slide.notes_slide.notes_text_frame.text = spec["notes"]
        if spec.get("hidden"):
            slide._element.set("show", "0")
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def with_member(data: bytes, name: str, body: bytes | str) -> bytes:
    """The ZIP ``data`` with member ``name`` replaced (or added)."""
    src = zipfile.ZipFile(io.BytesIO(data))
    members: dict[str, bytes | str] = {n: src.read(n) for n in src.namelist()}
    members[name] = body
    return zip_of(members)
