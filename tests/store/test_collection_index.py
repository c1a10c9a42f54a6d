"""One BM25 index across a collection's documents (store/collection_index.py), on a real SQLite store:
which document (or segment) a question ranks first, and when the index is made again."""

from __future__ import annotations

import numpy as np
import pytest

from ingest.extract import ExtractedText
from ingest.segments import Segment
from store import collection_index as ci
from store import index
from store.docstore import READY
from store.sqlite_store import SqliteStore

FILLER = "The office opens at nine. Letters are sorted in the morning and sent in the afternoon. "
LIGHTHOUSE = FILLER * 3 + "The lighthouse keeper Zebulon Quarry kept a blue parrot named Marigold."
BAKERY = FILLER * 3 + "The bakery on Tern Street sells rye bread baked with caraway seeds."
# A long document in two segments: the ferry's timetable is in the second.
HARBOUR = FILLER * 2 + "The harbour master logs every ship. " + FILLER * 2 + "The ferry to Inchcolm leaves at 14:40."


def _doc(store: SqliteStore, name: str, text: str, segments: list[Segment] | None = None):
    sha = f"{abs(hash(name)):064d}"[:64]
    doc = store.create(name=name, sha256=sha, kind="text", pages=1, tokens=10, chars=len(text))
    extracted = ExtractedText(text, [0], "text")
    store.write_files(doc.id, b"upload", extracted, None if segments else np.arange(3, dtype=np.int32))
    if segments:
        store.write_segments(doc.id, text, segments, [np.arange(3, dtype=np.int32) for _ in segments])
    store.set_status(doc.id, READY)
    return store.get(doc.id)


@pytest.fixture
def store(tmp_path):
    store = SqliteStore(tmp_path)
    yield store
    store.close()


@pytest.fixture
def members(store):
    cut = HARBOUR.index("The ferry")
    harbour = [Segment(0, 0, cut, 1, 1, 3), Segment(1, cut - 20, len(HARBOUR), 1, 1, 3)]
    return [_doc(store, "lighthouse.txt", LIGHTHOUSE), _doc(store, "bakery.md", BAKERY),
            _doc(store, "harbour.txt", HARBOUR, harbour)]  # fmt: skip


def test_each_question_ranks_the_document_or_segment_that_holds_its_words_first(store, members):
    lighthouse, bakery, harbour = members
    c = store.create_collection("town", [d.id for d in members])
    first = lambda q: ci.rank(store, c.id, members, q)[0][0]  # noqa: E731
    assert first("What was the name of Zebulon Quarry's parrot?") == ci.Unit(lighthouse.id)
    assert first("Which seeds go into the rye bread?") == ci.Unit(bakery.id)
    assert first("When does the ferry to Inchcolm leave?") == ci.Unit(harbour.id, 1)
    assert ci.rank(store, c.id, members, "Who won the regatta?") == []
    # The words every unit with the filler shares match them all (the harbour's second segment has
    # none of it), but hardly rank.
    ranked = ci.rank(store, c.id, members, "When are letters sorted? Zebulon")
    assert ranked[0][0] == ci.Unit(lighthouse.id) and len(ranked) == 3
    assert index.chosen(ranked, 0.8) == [ranked[0][0]], "the parrot's keeper is named in one document only"


def test_the_index_is_made_once_and_again_when_a_member_changes(store, members):
    c = store.create_collection("town", [d.id for d in members])
    directory = store.collection_dir(c.id)
    directory.mkdir(parents=True)
    units, rebuilt = ci.ensure(directory, store, members)
    assert rebuilt and len(units) == 4
    assert ci.ensure(directory, store, members) == (units, False), "nothing changed: read, not made"

    # A member removed (a deleted document leaves the collection): made again without it.
    units, rebuilt = ci.ensure(directory, store, members[1:])
    assert rebuilt and {u.doc_id for u in units} == {members[1].id, members[2].id}

    # A member re-ingested: its text.json written again (same length, new words), its row the same.
    lighthouse = members[0]
    changed = LIGHTHOUSE.replace("Marigold", "Rosemary")
    store.write_text(lighthouse.id, ExtractedText(changed, [0], "text"))
    assert ci.ensure(directory, store, members)[1], "a rewritten text makes it again"
    assert ci.rank(store, c.id, members, "Rosemary")[0][0] == ci.Unit(lighthouse.id)
    assert ci.rank(store, c.id, members, "Marigold") == []

    # A re-ingest that changes the row (new text rules, token count) with the same files.
    store.set_text(lighthouse.id, ExtractedText(changed, [0], "text", None, 2), tokens=11)
    assert ci.ensure(directory, store, [store.get(d.id) for d in members])[1]


def test_a_damaged_or_foreign_index_is_made_again(store, members):
    c = store.create_collection("town", [d.id for d in members])
    question = "When does the ferry to Inchcolm leave?"
    assert ci.rank(store, c.id, members, question)[0][0].segment == 1
    path = store.collection_dir(c.id) / index.INDEX_FILE
    path.write_bytes(b"not a database at all" * 100)
    assert ci.rank(store, c.id, members, question)[0][0].segment == 1
    index.build(store.collection_dir(c.id), ["a document's own segment index, no units"])
    assert ci.rank(store, c.id, members, question)[0][0].segment == 1


def test_a_member_whose_text_is_damaged_is_named(store, members):
    c = store.create_collection("town", [d.id for d in members])
    (store.dir(members[1].id) / "text.json").write_text("{ truncated")
    with pytest.raises(ci.MemberDamaged) as damaged:
        ci.rank(store, c.id, members, "rye bread")
    assert damaged.value.doc_id == members[1].id and "text.json" in str(damaged.value)


def test_deleting_the_collection_removes_its_index_and_the_sweep_its_orphans(store, members):
    c = store.create_collection("town", [d.id for d in members])
    ci.rank(store, c.id, members, "rye bread")
    assert (store.collection_dir(c.id) / index.INDEX_FILE).is_file()
    store.delete_collection(c.id)
    assert not store.collection_dir(c.id).exists()
    orphan = store.collections_dir / "0123456789abcdef"
    orphan.mkdir(parents=True)
    swept = store.sweep([d.id for d in members], [x.id for x in store.collections()])
    assert swept.dirs == ["0123456789abcdef"] and not orphan.exists()
