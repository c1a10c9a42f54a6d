"""Fuzz-style extraction (issue 27): ~200 malformed files of every format, generated from a fixed
seed (truncated, bit-flipped, with another format's magic, zip bombs within the limits, empty, huge
lines, deep nesting), through the real extraction worker the server uses (ingest/worker.py), so
crashes, time and memory limits are covered. Each one either extracts or raises a DocumentError
(HTTP 4xx); anything else would be a 500. Bounded: a fixed count, a short per-file time limit."""

from __future__ import annotations

import random
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from ingest.errors import DocumentError
from ingest.extract import ExtractedText
from ingest.worker import ExtractionWorker
from tests.ingest.office_samples import ods, pptx, xlsx
from tests.ingest.samples import chapter, docx, epub, mht, paragraph, pdf, with_members, zip_of

SEED = 27
TIMEOUT_S = 20.0  # per file: hostile files are killed at this limit and count as a DocumentError
MEMORY = 768 * 1024**2


def _bases() -> dict[str, bytes]:
    text = "Tom Sawyer painted the fence while Ben Rogers watched and ate an apple. " * 40
    return {
        "pdf": pdf([text[:200], text[200:400], "A third page."]),
        "pdf-plain": pdf(["Uncompressed page text."], compress=False),
        "docx": docx(paragraph(text[:300]) + paragraph("Second paragraph.")),
        "docx-chunk": docx(
            paragraph("Body.") + '<w:altChunk r:id="c"/><w:altChunk r:id="m"/>',
            {"c.htm": chapter("Chunk", text[:200], xhtml=False), "m.mht": mht(f"<p>{text[:100]}</p>")},
            {"c": "c.htm", "m": "m.mht"},
        ),
        "epub": epub(
            [
                ("a.xhtml", "application/xhtml+xml", chapter("A", text[:300])),
                ("b.html", "text/html", chapter("B", text[300:600], xhtml=False)),
                ("s.css", "text/css", "p { margin: 0 }"),
            ]
        ),  # fmt: skip
        "html": chapter("Page", text[:500], xhtml=False).encode(),
        "xhtml": chapter("Page", text[:500]).encode(),
        "text": text.encode(),
        "text-utf16": text.encode("utf-16"),
        "markdown": ("# Title\n\n" + text[:400] + "\n\n- a\n- b\n").encode(),
        "xlsx": xlsx({"Fence": [["who", "did"], ["Tom", text[:80]], ["Ben", 3.5]], "Two": [[None, "x"]]}),
        "ods": ods({"Fence": [["who", "did"], ["Tom", text[:80]], ["Ben", 3.5]]}),
        "csv": b"who,did,when\n" + b"".join(b"Tom,painted,%d\n" % i for i in range(20)),
        "pptx": pptx([{"title": "Fence", "bullets": [(0, text[:60]), (1, "apple")], "notes": "n"}, {"title": "End"}]),
    }


def _truncated(rng: random.Random, data: bytes) -> bytes:
    return data[: rng.randrange(0, len(data))]


def _flipped(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.choice((1, 4, 32))):
        i = rng.randrange(len(out))
        out[i] ^= 1 << rng.randrange(8)
    return bytes(out)


def _overwritten(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    i = rng.randrange(len(out))
    n = rng.randrange(1, 256)
    out[i : i + n] = rng.randbytes(min(n, len(out) - i))
    return bytes(out)


def _wrong_magic(rng: random.Random, data: bytes) -> bytes:
    magic = rng.choice([b"%PDF-1.7\n", b"PK\x03\x04", b"\x89PNG\r\n\x1a\n", b"<!DOCTYPE html>", b"\xef\xbb\xbf"])
    return magic + data[rng.randrange(0, 16) :]


def _generated(rng: random.Random) -> Iterator[tuple[str, bytes]]:
    """Files that are malformed as a whole, not damaged copies of a sample."""
    yield "empty", b""
    yield "one byte", b"\x00"
    yield "whitespace", b" \n\t\r\n"
    yield "huge line", b"word " * 400_000  # 2 MB without a newline
    yield "huge html line", b"<!DOCTYPE html><html><body><p>" + b"x" * 2_000_000 + b"</p></body></html>"
    yield "deep html", b"<!DOCTYPE html><html><body>" + b"<div>" * 50_000 + b"deep" + b"</div>" * 50_000
    yield "html dtd", b'<!DOCTYPE html [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;">]><html><body>&b;</body></html>'
    yield "random", rng.randbytes(4096)
    yield "pdf header only", b"%PDF-1.4\n%%EOF"
    yield "pdf no xref", b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF"
    yield "zip empty", zip_of({})
    yield "zip of zip", zip_of({"inner.zip": zip_of({"word/document.xml": "<x/>"})})
    yield "docx no document", zip_of({"word/document.xml": b""})
    yield "epub no opf", zip_of({"META-INF/container.xml": "<container/>", "mimetype": "application/epub+zip"})
    # Zip bombs within the limits: they pass the container checks, then cost the reader real work.
    big = b"<w:p><w:r><w:t>" + b"lorem ipsum " * 80_000 + b"</w:t></w:r></w:p>"  # ~1 MB, one paragraph
    yield "docx big paragraph", docx(big.decode())
    many = [(f"c{i}.xhtml", "application/xhtml+xml", chapter(f"C{i}", "x")) for i in range(300)]
    yield "epub many chapters", epub(many)
    yield "deflate bomb member", zip_of({"word/document.xml": b"<" + b"A" * (2 * 1024**2)})  # ratio > 200: refused
    compressed = zlib.compress(b"a" * 1_000_000)
    yield "flate pdf", pdf(["x"]).replace(b"%PDF-1.4", b"%PDF-1.4\n%" + compressed[:64])
    yield "nul text", b"\x00" * 10_000
    yield "utf16 no bom", "Hello world, no byte order mark here.".encode("utf-16-le")
    yield "mht as text", mht("<p>not in a docx</p>")
    yield "epub chapter is binary", epub([("a.xhtml", "application/xhtml+xml", rng.randbytes(2000))])
    yield "docx chunk loop", docx('<w:altChunk r:id="d"/>', {"self.docx": zip_of({"a": "b"})}, {"d": "self.docx"})
    yield (
        "epub xml entity",
        with_members(
            epub([("a.xhtml", "application/xhtml+xml", chapter("A", "t"))]),
            {"OEBPS/content.dat": '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e "e">]><x>&e;</x>'},
        ),
    )


def cases() -> list[tuple[str, bytes]]:
    rng = random.Random(SEED)
    bases = _bases()
    mutations: list[tuple[str, Callable[[random.Random, bytes], bytes]]] = [
        ("truncated", _truncated),
        ("flipped", _flipped),
        ("overwritten", _overwritten),
        ("wrong magic", _wrong_magic),
    ]
    out = list(_generated(rng))
    while len(out) < 200:
        kind = rng.choice(sorted(bases))
        name, mutate = rng.choice(mutations)
        out.append((f"{kind} {name} #{len(out)}", mutate(rng, bases[kind])))
    return out


@pytest.fixture(scope="module")
def worker() -> Iterator[ExtractionWorker]:
    w = ExtractionWorker(timeout_s=TIMEOUT_S, memory_bytes=MEMORY, workers=2, queue=len(cases()))
    w.prestart()
    yield w
    w.close()


def test_every_malformed_file_extracts_or_is_a_document_error(worker):
    files = cases()
    assert len(files) == 200 and len({data for _, data in files}) > 190, "200 distinct files"
    t0 = time.monotonic()

    def one(case: tuple[str, bytes]) -> tuple[str, str]:
        name, data = case
        try:
            result = worker.extract(data, max_chars=2_000_000)
        except DocumentError as exc:
            assert str(exc), f"{name}: a DocumentError without a reason"
            return name, type(exc).__name__
        except Exception as exc:  # noqa: BLE001 - anything else is the 500 this test is about
            return name, f"BUG {type(exc).__name__}: {exc}"
        assert isinstance(result, ExtractedText) and result.text.strip(), name
        return name, "ok"

    with ThreadPoolExecutor(4) as pool:
        outcomes = list(pool.map(one, files))
    bugs = [(name, what) for name, what in outcomes if what.startswith("BUG")]
    assert not bugs, bugs
    kinds = {what for _, what in outcomes}
    assert "ok" in kinds and len(kinds) >= 4, f"the mutations reach several outcomes: {kinds}"
    assert time.monotonic() - t0 < 600
    # The worker still reads a good file afterwards.
    assert "Tom Sawyer" in worker.extract(_bases()["docx"]).text
