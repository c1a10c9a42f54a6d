"""One record per document in the engine: what the engine knows of a document is written only by the
engine's own code and its methods, read as one frozen view, and a HotDoc is the RAM cache entry only
(the features keep what they build for it)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from server.engine.hot import HotDoc
from server.engine.reading import DocView

ROOT = Path(__file__).resolve().parents[3]
#: The engine's document state: nothing outside server/engine reaches into it (reads go through
#: Engine.view, reading_ids, unfit_ids, is_reading; writes through reading_elsewhere, mark_unfit, refit).
PRIVATE = re.compile(r"\bengine\.(progress|readings|_unfit|unfit|states|deleted|evicted)\b")


def test_no_module_outside_the_engine_reaches_into_its_document_state():
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for package in ("server", "cluster", "testkit")
        for path in (ROOT / package).rglob("*.py")
        if "server/engine" not in path.as_posix()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if PRIVATE.search(line)
    ]
    assert not found, found


def test_a_hot_doc_is_the_cache_entry_only():
    """The lookup index, the citation index, the quote index and the answer history are kept by their
    features (server/engine/drafters.py, citations.py, quotes.py, history.py), keyed weakly by the
    entry; whether an ingestion here made it and no question came yet, by the cache (HotDocs)."""
    fields = {f.name for f in dataclasses.fields(HotDoc)}
    assert fields == {"prefix", "state", "parts", "last_hidden"}
    assert "__weakref__" in HotDoc.__slots__ and HotDoc.__hash__ is object.__hash__


def test_the_view_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        DocView().progress = 0.5  # type: ignore[misc]
