import numpy as np
import pytest

from ingest.extract import ExtractedText
from ingest.store import FAILED, INGESTING, READY, DocStore, DuplicateDocument


def _create(store, sha="a" * 64):
    return store.create(name="doc.pdf", sha256=sha, kind="pdf", pages=2, tokens=10, chars=20)


def test_create_get_list_status(tmp_path):
    store = DocStore(tmp_path)
    doc = _create(store)
    assert doc.status == INGESTING and doc.id.isalnum()
    store.set_status(doc.id, FAILED, "prefill failed: boom")
    assert store.get(doc.id).error == "prefill failed: boom"
    store.set_status(doc.id, READY)
    assert [d.id for d in store.list()] == [doc.id]


def test_duplicate_bytes_raise_with_the_existing_document(tmp_path):
    store = DocStore(tmp_path)
    doc = _create(store)
    with pytest.raises(DuplicateDocument) as err:
        _create(store)
    assert err.value.existing.id == doc.id


def test_rows_and_files_survive_a_reopen(tmp_path):
    store = DocStore(tmp_path)
    doc = _create(store)
    store.write_files(doc.id, b"bytes", ExtractedText("hello\n\nworld", [0, 7], "pdf"), np.arange(5, dtype=np.int32))
    reopened = DocStore(tmp_path)
    assert reopened.get(doc.id) == store.get(doc.id)
    assert reopened.read_text(doc.id).page_of(8) == 2
    assert reopened.read_prefix(doc.id).tolist() == [0, 1, 2, 3, 4]


def test_paths_are_never_built_from_user_input(tmp_path):
    with pytest.raises(ValueError):
        DocStore(tmp_path).dir("../etc")


def test_delete_removes_row_and_files(tmp_path):
    store = DocStore(tmp_path)
    doc = _create(store)
    store.write_prefix(doc.id, np.arange(3, dtype=np.int32)) if store.dir(doc.id).mkdir() is None else None
    store.delete(doc.id)
    assert store.get(doc.id) is None and not store.dir(doc.id).exists()
