"""store/checked.py and store/repair.py: a damaged text.json, prefix.npy, segments.json or
segments.sqlite3 is a typed DocumentFilesDamaged naming the file, not a 500, and reading it writes
nothing; the index is rebuilt and the prefix re-tokenized from what is intact by the repairs. Real files, written by
store/files.py, with the embedded Gemma's tokenizer."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ingest import segments as segs
from ingest.errors import DocumentFilesDamaged, IndexDamaged, PrefixDamaged, SegmentsDamaged, TextDamaged
from ingest.extract import ExtractedText
from ingest.prompt import plain_layout
from store import checked, index, repair
from store.files import DocFiles

TEXT = "\n\n".join(f"Chapter {i}. The keeper of lighthouse number {i} counted {i * 7} ships." for i in range(1, 13))


@pytest.fixture
def whole(tmp_path, gemma):
    files = DocFiles(tmp_path)
    layout = plain_layout(gemma.add_bos)
    extracted = ExtractedText(TEXT, [0, TEXT.index("Chapter 7")], "text", "utf-8")
    prefix = layout.document_prefix(gemma, TEXT)
    files.write_files("abc", b"upload bytes", extracted, prefix)
    return files.dir("abc"), extracted, prefix, layout


@pytest.fixture
def segmented(tmp_path, gemma):
    files = DocFiles(tmp_path)
    layout = plain_layout(gemma.add_bos)
    extracted = ExtractedText(TEXT, [0], "text", "utf-8")
    segments, prefixes = segs.split(extracted, layout, gemma, limit=120, overlap=16)
    assert len(segments) >= 3
    files.write_files("seg", b"upload", extracted, None)
    files.write_segments("seg", TEXT, segments, prefixes)
    return files.dir("seg"), segments, prefixes, layout


def test_intact_files_pass(whole, segmented):
    directory, extracted, prefix, _ = whole
    assert checked.read_text(directory, len(TEXT), 2) == extracted
    np.testing.assert_array_equal(checked.read_prefix(directory, n_tokens=len(prefix)), prefix)
    assert repair.check_document(directory, len(TEXT), 2, len(prefix)) == []
    seg_dir, segments, _, _ = segmented
    assert checked.read_segments(seg_dir, len(TEXT)) == segments
    assert repair.ensure_index(seg_dir) is False, "nothing to repair"
    assert repair.check_document(seg_dir, len(TEXT)) == []


@pytest.mark.parametrize(
    "damage",
    [
        lambda raw: raw[: len(raw) // 2],  # truncated: a 500 on /text before
        lambda raw: b"\x00" * len(raw),
        lambda raw: json.dumps({"text": 5}).encode(),
        lambda raw: json.dumps({**json.loads(raw), "page_starts": [0, 10**9]}).encode(),
    ],
    ids=["truncated", "zeroed", "wrong types", "page map past the text"],
)
def test_a_damaged_text_json_is_text_damaged(whole, damage):
    directory = whole[0]
    path = directory / checked.TEXT_FILE
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(TextDamaged) as damaged:
        checked.read_text(directory)
    assert damaged.value.file == "text.json" and "reingest" in damaged.value.action
    assert [type(e) for e in repair.check_document(directory)] == [TextDamaged]


def test_a_text_json_that_disagrees_with_the_row_is_text_damaged(whole):
    with pytest.raises(TextDamaged, match="characters"):
        checked.read_text(whole[0], chars=len(TEXT) + 1)


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: p.write_bytes(p.read_bytes()[:-7]),  # truncated: every question failed before
        lambda p: np.save(p, np.arange(5, dtype=np.int64)),
        lambda p: np.save(p, np.array([1, 2, 10**9], dtype=np.int32)),
        lambda p: np.save(p, np.load(p)[:-1]),  # a valid file, one token short
    ],
    ids=["truncated", "int64", "id past the vocabulary", "one token short"],
)
def test_a_damaged_prefix_is_prefix_damaged_and_is_repaired_from_the_text(whole, gemma, damage):
    directory, extracted, prefix, layout = whole
    damage(directory / checked.PREFIX_FILE)
    with pytest.raises(PrefixDamaged):
        checked.read_prefix(directory, n_vocab=gemma.n_vocab, n_tokens=len(prefix))
    repaired = repair.repair_prefix(directory, extracted.text, layout, gemma, n_tokens=len(prefix))
    np.testing.assert_array_equal(repaired, prefix)
    np.testing.assert_array_equal(checked.read_prefix(directory, gemma.n_vocab, len(prefix)), prefix)


def test_a_prefix_other_than_its_snapshots_is_prefix_damaged(whole):
    from ingest.manifest import tokens_sha256

    directory, _, prefix, _ = whole
    (directory / "state.json").write_text(json.dumps({"n_tokens": len(prefix), "tokens_sha256": tokens_sha256(prefix)}))
    checked.read_prefix(directory)  # the one it was made from
    other = prefix.copy()
    other[3] += 1
    np.save(directory / checked.PREFIX_FILE, other)
    with pytest.raises(PrefixDamaged, match="snapshot"):
        checked.read_prefix(directory)


def test_repair_refuses_a_text_that_tokenizes_to_another_length(whole, gemma):
    directory, _, prefix, layout = whole
    with pytest.raises(PrefixDamaged, match="tokens"):
        repair.repair_prefix(directory, TEXT + " and more", layout, gemma, n_tokens=len(prefix))


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: p.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000),  # "file is not a database" before
        lambda p: p.write_bytes(b""),
        lambda p: p.unlink(),
        lambda p: index.build(p.parent, ["one", "two"]),  # wrong rows
    ],
    ids=["garbage", "empty", "missing", "wrong rows"],
)
def test_a_damaged_index_is_rebuilt_from_the_text_and_segment_list(segmented, damage):
    seg_dir, segments, _, _ = segmented
    question = "How many ships did keeper 11 count?"
    before = index.rank(seg_dir, question)
    damage(seg_dir / index.INDEX_FILE)
    assert repair.ensure_index(seg_dir) is True
    assert index.rank(seg_dir, question) == before
    assert repair.ensure_index(seg_dir) is False


def test_an_index_of_an_older_version_is_rebuilt(segmented):
    import sqlite3
    from contextlib import closing

    seg_dir = segmented[0]
    with closing(sqlite3.connect(seg_dir / index.INDEX_FILE)) as db:
        db.execute("PRAGMA user_version = 0")
        db.commit()
    assert repair.ensure_index(seg_dir) is True and index.version(seg_dir) == index.INDEX_VERSION


@pytest.mark.parametrize(
    "damage",
    [
        lambda raw: raw[:-5],
        lambda raw: json.dumps(json.loads(raw)[::-1]).encode(),
        lambda raw: json.dumps([{**s, "end": s["start"]} for s in json.loads(raw)]).encode(),
    ],
    ids=["truncated", "out of order", "empty spans"],
)
def test_a_damaged_segment_list_is_segments_damaged_and_the_index_is_not_rebuilt_from_it(segmented, damage):
    seg_dir = segmented[0]
    path = seg_dir / segs.SEGMENTS_FILE
    path.write_bytes(damage(path.read_bytes()))
    (seg_dir / index.INDEX_FILE).unlink()
    with pytest.raises(SegmentsDamaged):
        repair.ensure_index(seg_dir)
    assert not (seg_dir / index.INDEX_FILE).exists()
    found = repair.check_document(seg_dir)
    assert found and all(isinstance(e, DocumentFilesDamaged) for e in found)


def test_check_document_names_a_missing_segment_prefix(segmented):
    seg_dir, segments, _, _ = segmented
    (seg_dir / "segments" / "1" / checked.PREFIX_FILE).unlink()
    found = repair.check_document(seg_dir)
    assert [type(e) for e in found] == [PrefixDamaged] and "1/prefix.npy" in str(found[0])


def _files(directory) -> dict[str, tuple[int, int]]:
    """Every file under ``directory``: relative path -> (size, mtime ns)."""
    return {str(p.relative_to(directory)): (p.stat().st_size, p.stat().st_mtime_ns) for p in directory.rglob("*")}


def test_rank_segments_raises_index_damaged_for_a_corrupt_missing_or_old_index(segmented):
    # Issue 27: a corrupt segments.sqlite3 ("file is not a database") failed every question with a 500.
    import sqlite3
    from contextlib import closing

    seg_dir = segmented[0]
    question, history = "How many ships did keeper 11 count?", [("Who counted ships?", "The keepers.")]
    before = checked.rank_segments(seg_dir, question, history)
    assert before == index.rank_conversation(seg_dir, question, history) and before
    path = seg_dir / index.INDEX_FILE
    with closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA user_version = 0")
        db.commit()
    with pytest.raises(IndexDamaged, match="older"):
        checked.rank_segments(seg_dir, question, history)
    path.write_bytes(b"not a database at all" * 100)
    with pytest.raises(IndexDamaged, match="not a readable index"):
        checked.rank_segments(seg_dir, question, history)
    path.unlink()
    with pytest.raises(IndexDamaged, match="missing"):
        checked.rank_segments(seg_dir, question, history)
    assert repair.ensure_index(seg_dir) is True  # the write is the repair's, never the reader's
    assert checked.rank_segments(seg_dir, question, history) == before


def test_readers_of_damaged_files_raise_and_write_nothing(tmp_path, gemma):
    """Issue 50: reads only read. Each reader of a damaged file (and check_document over them all)
    raises its typed error, or lists it, leaving every file of the document as it was."""
    from store.sqlite_store import SqliteStore

    store = SqliteStore(tmp_path)
    layout = plain_layout(gemma.add_bos)
    extracted = ExtractedText(TEXT, [0], "text", "utf-8")
    segments, prefixes = segs.split(extracted, layout, gemma, limit=120, overlap=16)
    doc = store.create(name="d.txt", sha256="ab" * 32, kind="text", pages=1, tokens=0, chars=len(TEXT))
    store.write_files(doc.id, TEXT.encode(), extracted, None)
    store.write_segments(doc.id, TEXT, segments, prefixes)
    directory = store.dir(doc.id)
    (directory / checked.TEXT_FILE).write_bytes(b'{"text": ')
    (directory / segs.SEGMENTS_FILE).write_bytes(b"[")
    (directory / index.INDEX_FILE).write_bytes(b"not a database at all" * 100)
    (directory / "segments" / "0" / checked.PREFIX_FILE).write_bytes(b"not a prefix")
    before = _files(directory)
    with pytest.raises(TextDamaged):
        store.read_text(doc.id)
    with pytest.raises(SegmentsDamaged):
        store.read_segments(doc.id)
    with pytest.raises(SegmentsDamaged):
        store.keys(doc.id)
    with pytest.raises(IndexDamaged):
        store.rank_segments(doc.id, "How many ships did keeper 11 count?")
    with pytest.raises(PrefixDamaged):
        store.read_prefix(segs.key(doc.id, 0))
    assert {type(e) for e in repair.check_document(directory)} == {TextDamaged, SegmentsDamaged}
    assert _files(directory) == before, "a reader wrote"
    segs.write(directory, segments)
    before = _files(directory)
    found = repair.check_document(directory)
    assert {type(e) for e in found} == {TextDamaged, PrefixDamaged, IndexDamaged}, found
    assert _files(directory) == before, "a reader wrote"
    store.close()


def test_a_pdf_s_printed_page_labels_are_kept_and_checked(tmp_path):
    """Issue 39 item 5: the labels a citation names ("p. ii (PDF p. 2)") survive the store."""
    files = DocFiles(tmp_path)
    extracted = ExtractedText("one\n\ntwo", [0, 5], "pdf", None, page_labels=["i", "ii"])
    files.write_files("lab", b"upload", extracted, None)
    assert checked.read_text(files.dir("lab"), 8, 2).page_labels == ["i", "ii"]
    raw = json.loads((files.dir("lab") / "text.json").read_text())
    (files.dir("lab") / "text.json").write_text(json.dumps({**raw, "page_labels": [1, 2]}))
    with pytest.raises(TextDamaged):
        checked.read_text(files.dir("lab"), 8, 2)
