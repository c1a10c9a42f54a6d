"""The store interface, the same tests on both implementations: SQLite in the data directory and a
real PostgreSQL server (tests/pg.py, skipped with a reason where its binaries are missing)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from ingest.extract import ExtractedText
from store.docstore import FAILED, INGESTING, READY, DocumentsMissing, DuplicateCollection, DuplicateDocument
from store.stores import open_store


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request) -> str | None:
    """None: SQLite in the data directory; else a fresh PostgreSQL database."""
    return request.getfixturevalue("postgres_url") if request.param == "postgres" else None


def _create(store, sha="a" * 64, **extra):
    return store.create(name="doc.pdf", sha256=sha, kind="pdf", pages=2, tokens=10, chars=20, **extra)


def test_rows_round_trip_and_survive_a_reopen(tmp_path, database_url):
    store = open_store(tmp_path, database_url)
    doc = _create(store, warnings=[{"page": 2, "message": "garbled"}])
    assert doc.status == INGESTING and doc.id.isalnum() and doc.warnings == ({"page": 2, "message": "garbled"},)
    store.set_status(doc.id, FAILED, "prefill failed: boom")
    assert store.get(doc.id).error == "prefill failed: boom"
    store.set_status(doc.id, READY)
    store.set_text(doc.id, ExtractedText("new text", [0], "text", "utf-8", 2), tokens=7)
    store.write_files(doc.id, b"bytes", ExtractedText("hello", [0], "pdf"), np.arange(5, dtype=np.int32))
    reopened = open_store(tmp_path, database_url)
    assert reopened.get(doc.id) == store.get(doc.id)
    got = reopened.get(doc.id)
    assert (got.status, got.error, got.tokens, got.chars, got.encoding, got.text_rules) == (
        READY,
        None,
        7,
        8,
        "utf-8",
        2,
    )
    assert [d.id for d in reopened.list()] == [doc.id] and reopened.by_sha256("a" * 64) == got
    store.delete(doc.id)
    assert reopened.get(doc.id) is None and not store.dir(doc.id).exists()
    store.close()
    reopened.close()


def test_two_servers_racing_the_same_bytes_make_one_document(tmp_path, database_url):
    """Eight inserts of the same sha256 at once, each through a store (connection) of its own, as
    replicas sharing the database: one row; every other caller gets DuplicateDocument naming it."""
    stores = [open_store(tmp_path, database_url) for _ in range(8)]
    barrier, results = threading.Barrier(len(stores)), []

    def insert(store) -> None:
        barrier.wait()
        try:
            results.append(("created", _create(store, sha="f" * 64).id))
        except DuplicateDocument as dup:
            results.append(("duplicate", dup.existing.id))

    threads = [threading.Thread(target=insert, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    created = [doc_id for kind, doc_id in results if kind == "created"]
    assert len(results) == 8 and len(created) == 1, results
    assert {doc_id for _, doc_id in results} == set(created)
    assert [d.id for d in stores[0].list()] == created
    for s in stores:
        s.close()


def test_a_dead_owners_ingestion_is_claimed_once(tmp_path, database_url):
    """A lease that runs out (its server died) is claimed by exactly one of the servers asking."""
    store = open_store(tmp_path, database_url)
    store.share("replica-a", lease_s=0.2)
    doc = _create(store)
    assert (doc.owner, doc.status) == ("replica-a", INGESTING) and doc.lease_until > time.time()
    assert store.renew("replica-a", 0.2) == 1
    assert store.claim_stale("replica-b", 10) == [], "a live lease is not taken"
    time.sleep(0.3)
    others = [open_store(tmp_path, database_url) for _ in range(4)]
    claims: list[list] = []
    threads = [
        threading.Thread(target=lambda s=s, n=n: claims.append(s.claim_stale(f"r{n}", 10)))
        for n, s in enumerate(others)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    won = [c for c in claims if c]
    assert len(won) == 1 and won[0][0].id == doc.id and won[0][0].owner.startswith("r")
    assert store.get(doc.id).owner == won[0][0].owner and store.renew("replica-a", 10) == 0
    for s in [store, *others]:
        s.close()


def test_an_unreachable_database_is_a_startup_error_naming_it(tmp_path):
    pytest.importorskip("psycopg")
    from ingest.errors import DataDirUnusable

    with pytest.raises(DataDirUnusable, match="127.0.0.1:1/docqa") as err:
        open_store(tmp_path, "postgresql://docqa:secret@127.0.0.1:1/docqa")
    assert "secret" not in str(err.value)


def test_collections_round_trip_keep_their_order_and_survive_a_reopen(tmp_path, database_url):
    store = open_store(tmp_path, database_url)
    a, b, c = (_create(store, sha=ch * 64) for ch in "abc")
    first = store.create_collection("contracts", [c.id, a.id, c.id, b.id])  # a repeated id counts once
    assert first.id.isalnum() and first.name == "contracts" and first.document_ids == (c.id, a.id, b.id)
    time.sleep(0.01)
    second = store.create_collection("pair", [b.id, a.id])
    reopened = open_store(tmp_path, database_url)
    assert reopened.collection(first.id) == first and reopened.collection("0" * 16) is None
    assert [x.id for x in reopened.collections()] == [second.id, first.id]  # newest first
    assert reopened.collections()[0].document_ids == (b.id, a.id)
    with pytest.raises(DuplicateCollection) as dup:
        store.create_collection("contracts", [a.id])
    assert dup.value.existing == first
    store.delete_collection(first.id)
    assert reopened.collection(first.id) is None and [x.id for x in store.collections()] == [second.id]
    assert store.get(a.id) is not None, "deleting a collection keeps its documents"
    store.create_collection("contracts", [a.id])  # the name is free again
    # Names are kept printable on both stores (PostgreSQL text cannot hold NUL; a bidi override misleads).
    odd = store.create_collection("nul\u0000 and \u202eoverride", [a.id])
    assert odd.name == "nul and override" and reopened.collection(odd.id).name == "nul and override"
    store.close()
    reopened.close()


def test_deleting_a_document_removes_it_from_its_collections(tmp_path, database_url):
    store = open_store(tmp_path, database_url)
    a, b = (_create(store, sha=ch * 64) for ch in "ab")
    both = store.create_collection("both", [a.id, b.id])
    only_a = store.create_collection("only a", [a.id])
    store.delete(a.id)
    assert store.collection(both.id).document_ids == (b.id,)
    assert store.collection(only_a.id).document_ids == (), "an emptied collection stays, with no documents"
    store.close()


def test_a_collection_of_missing_documents_is_refused_naming_them_and_writes_nothing(tmp_path, database_url):
    store = open_store(tmp_path, database_url)
    a = _create(store)
    with pytest.raises(DocumentsMissing) as missing:
        store.create_collection("ghosts", [a.id, "0123456789abcdef", "fedcba9876543210"])
    assert missing.value.ids == ("0123456789abcdef", "fedcba9876543210")
    assert store.collections() == []
    assert store.create_collection("ghosts", [a.id]).document_ids == (a.id,), "the failed insert took no name"
    store.close()


def test_an_old_database_gains_the_collection_tables(tmp_path):
    """A SQLite database made before collections: opening it adds their tables, documents intact."""
    import sqlite3

    from store import schema

    with sqlite3.connect(tmp_path / "docqa.sqlite3") as db:
        db.execute(schema.DOCUMENTS.create("sqlite")[0])  # the documents table alone, as before collections
        db.execute(
            "INSERT INTO documents (id, name, sha256, kind, pages, tokens, chars, status, created_at)"
            " VALUES ('abc1', 'old.pdf', ?, 'pdf', 1, 5, 9, 'ready', 1.0)",
            ("e" * 64,),
        )
    store = open_store(tmp_path)
    assert store.get("abc1").name == "old.pdf"
    assert store.create_collection("old", ["abc1"]).document_ids == ("abc1",)
    store.close()
