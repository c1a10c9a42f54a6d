"""server/engine/repairs.py, the one repair path: a store reader of a damaged file raises, the file is
repaired with the extractor and tokenizer passed in, and the read tried once more succeeds; what
cannot be repaired raises the reader's error again. Real files over a SQLite store, with the
embedded Gemma's tokenizer."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

from ingest import segments as segs
from ingest.errors import IndexDamaged, PrefixDamaged, SegmentsDamaged, TextDamaged
from ingest.extract import ExtractedText
from ingest.prompt import plain_layout
from server.engine.repairs import Repairs
from store import checked, index
from store.sqlite_store import SqliteStore

TEXT = "\n\n".join(f"Chapter {i}. The keeper of lighthouse number {i} counted {i * 7} ships." for i in range(1, 13))
EXTRACTED = ExtractedText(TEXT, [0], "text", "utf-8")
QUESTION = "How many ships did keeper 11 count?"


@pytest.fixture
def stored(tmp_path, gemma):
    """A segmented document as an upload stores it: (store, doc id, segments, prefixes, layout)."""
    store = SqliteStore(tmp_path)
    layout = plain_layout(gemma.add_bos)
    segments, prefixes = segs.split(EXTRACTED, layout, gemma, limit=120, overlap=16)
    assert len(segments) >= 3
    doc = store.create(name="d.txt", sha256="cd" * 32, kind="text", pages=1, tokens=0, chars=len(TEXT))
    store.write_files(doc.id, TEXT.encode(), EXTRACTED, None)
    store.write_segments(doc.id, TEXT, segments, prefixes)
    yield store, doc.id, segments, prefixes, layout
    store.close()


def _repairs(store, gemma, layout, extract=lambda upload: EXTRACTED) -> Repairs:
    return Repairs(store, extract, gemma, layout, split_limit=120, overlap=16)


def test_each_damaged_file_is_repaired_and_read_again(stored, gemma):
    store, doc_id, segments, prefixes, layout = stored
    repairs, directory = _repairs(store, gemma, layout), store.dir(doc_id)
    ranked = store.rank_segments(doc_id, QUESTION)
    whole = {name: (directory / name).read_bytes() for name in (checked.TEXT_FILE, segs.SEGMENTS_FILE)}
    (directory / checked.TEXT_FILE).write_bytes(b'{"text": ')
    (directory / segs.SEGMENTS_FILE).write_bytes(b"[")
    (directory / index.INDEX_FILE).write_bytes(b"not a database at all" * 100)

    assert repairs.read(doc_id, partial(store.read_text, doc_id)) == EXTRACTED
    assert repairs.read(doc_id, partial(store.read_segments, doc_id)) == segments
    assert {name: (directory / name).read_bytes() for name in whole} == whole, "written back as they were"
    assert repairs.read(doc_id, partial(store.rank_segments, doc_id, QUESTION)) == ranked
    key = segs.key(doc_id, 1)  # (a segment list is made again only while every segment's prefix is intact)
    (store.state_dir(key) / checked.PREFIX_FILE).write_bytes(b"not a prefix")
    np.testing.assert_array_equal(repairs.read(key, partial(store.read_prefix, key)), prefixes[1])


def test_a_segment_list_is_repaired_through_its_damaged_text(stored, gemma):
    """The repair of one file reads what it is made from through the same path."""
    store, doc_id, segments, _, layout = stored
    (store.dir(doc_id) / checked.TEXT_FILE).write_bytes(b"")
    (store.dir(doc_id) / segs.SEGMENTS_FILE).write_bytes(b"[")
    assert _repairs(store, gemma, layout).read(doc_id, partial(store.keys, doc_id)) == [
        segs.key(doc_id, s.index) for s in segments
    ]


def test_what_cannot_be_repaired_raises_the_readers_error_and_writes_nothing(stored, gemma):
    store, doc_id, _, _, layout = stored
    directory = store.dir(doc_id)
    (directory / checked.TEXT_FILE).write_bytes(b'{"text": ')
    (directory / segs.SEGMENTS_FILE).write_bytes(b"[")
    (directory / index.INDEX_FILE).write_bytes(b"not a database at all" * 100)
    files = {p: p.read_bytes() for p in directory.rglob("*") if p.is_file()}
    other = ExtractedText(TEXT + " and more", [0], "text", "utf-8")
    no_extractor, no_model = Repairs(store), Repairs(store, lambda upload: other)
    with pytest.raises(TextDamaged):
        no_extractor.read(doc_id, partial(store.read_text, doc_id))
    with pytest.raises(TextDamaged):  # extracted again, but not the text the document was made from
        no_model.read(doc_id, partial(store.read_text, doc_id))
    with pytest.raises(SegmentsDamaged):
        no_model.read(doc_id, partial(store.read_segments, doc_id))
    with pytest.raises(TextDamaged):  # the index is rebuilt from the text, damaged beyond repair here
        _repairs(store, gemma, layout, extract=None).read(doc_id, partial(store.rank_segments, doc_id, QUESTION))
    assert {p: p.read_bytes() for p in directory.rglob("*") if p.is_file()} == files


def test_an_index_of_an_older_version_is_rebuilt_once_asked(stored, gemma):
    import sqlite3
    from contextlib import closing

    store, doc_id, _, _, layout = stored
    with closing(sqlite3.connect(store.dir(doc_id) / index.INDEX_FILE)) as db:
        db.execute("PRAGMA user_version = 0")
        db.commit()
    with pytest.raises(IndexDamaged):
        store.rank_segments(doc_id, QUESTION)
    assert Repairs(store).read(doc_id, partial(store.rank_segments, doc_id, QUESTION))
    assert index.version(store.dir(doc_id)) == index.INDEX_VERSION


def test_a_whole_documents_prefix_is_made_again_at_the_rows_length(tmp_path, gemma):
    store = SqliteStore(tmp_path)
    layout = plain_layout(gemma.add_bos)
    prefix = np.asarray(layout.document_prefix(gemma, TEXT), dtype=np.int32)
    doc = store.create(name="d.txt", sha256="ef" * 32, kind="text", pages=1, tokens=len(prefix), chars=len(TEXT))
    store.write_files(doc.id, TEXT.encode(), EXTRACTED, prefix)
    (store.dir(doc.id) / checked.PREFIX_FILE).write_bytes(b"")
    with pytest.raises(PrefixDamaged):
        Repairs(store).read(doc.id, partial(store.read_prefix, doc.id))  # no tokenizer: reported
    np.testing.assert_array_equal(
        Repairs(store, None, gemma, layout).read(doc.id, partial(store.read_prefix, doc.id)), prefix
    )
    store.close()
