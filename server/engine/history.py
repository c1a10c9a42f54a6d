"""The earlier answers about each document, kept with it: loaded when the document becomes hot,
extended by every finished answer, written next to its snapshot (``history.npy`` in the document's
or segment's directory: store/files.py ``state_dir``).

The history (spec/history.py) survives a restart, is deleted with its document (it lives in its
directory), is bounded (oldest answers dropped first, ``DOCQA_ANSWER_HISTORY_TOKENS``), and starts
empty again after a re-ingest (store/writes.py ``store_again`` removes it with the snapshots: its
questions were about the old text). ``DOCQA_ANSWER_HISTORY=false`` neither reads nor writes one (a
multi-tenant server where one user's answers must not speed up another's).

A finished answer's history is rebuilt and written on a worker thread of its own: the index of a
full history takes tens of milliseconds to build, which the engine's next step must not wait for.
Each history is kept here, keyed weakly by its document's cache entry (a HotDoc: it goes with the
entry): set once by the engine thread when the entry is made (:meth:`attach`, before any answer about
it can be recorded), then only by the worker, which replaces it whole; the engine thread reads it.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from weakref import WeakKeyDictionary

import numpy as np

from ingest.segments import parse_key
from runtime.atomic import write_atomic
from spec.history import AnswerHistory
from store.docstore import DocStore
from store.files import HISTORY_FILE

log = logging.getLogger("docqa.engine")


class AnswerHistories:
    """Reads, extends and writes documents' answer histories (``enabled``: DOCQA_ANSWER_HISTORY)."""

    def __init__(self, store: DocStore, enabled: bool, max_tokens: int, min_n: int, max_n: int) -> None:
        self.store, self.enabled = store, enabled
        self.max_tokens, self.min_n, self.max_n = max_tokens, min_n, max_n
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="docqa-history")
        self._of: WeakKeyDictionary = WeakKeyDictionary()  # HotDoc -> its AnswerHistory

    def attach(self, key: str, hot) -> None:
        """``key``'s history, loaded for its new cache entry ``hot`` (engine thread)."""
        if (history := self.load(key)) is not None:
            self._of[hot] = history

    def of(self, hot) -> AnswerHistory | None:
        """The history of cache entry ``hot`` (None: histories are off, or it has none)."""
        return self._of.get(hot)

    def empty(self) -> AnswerHistory:
        return AnswerHistory((), self.max_tokens, self.min_n, self.max_n)

    def load(self, key: str) -> AnswerHistory | None:
        """``key``'s history from its directory (empty when there is none yet); None when disabled. A
        damaged file is logged and set aside: drafts are a speed-up, never worth an error."""
        if not self.enabled:
            return None
        path = self.store.state_dir(key) / HISTORY_FILE
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return self.empty()
        except OSError as exc:
            log.warning("%s: cannot read its answer history (%s); starting an empty one", key, exc)
            return self.empty()
        try:
            return AnswerHistory.from_bytes(data, self.max_tokens, self.min_n, self.max_n)
        except ValueError as exc:
            log.warning("%s: its answer history is unreadable (%s); starting an empty one", key, exc)
            return self.empty()

    def record(self, key: str, hot, question: np.ndarray, answer: list[int]) -> None:
        """After an answer about ``key`` (``hot``: its HotDoc) ended: add it to the history (off the
        engine thread), then write the history to disk, only while the document still exists."""
        if not self.enabled or hot not in self._of or not answer:
            return
        self._pool.submit(self._record, key, hot, np.asarray(question, np.int32), list(answer))

    def _record(self, key: str, hot, question: np.ndarray, answer: list[int]) -> None:
        try:
            self._of[hot] = history = self._of[hot].add(question, answer)
            with self.store.holding(parse_key(key)[0]) as directory:
                if directory.is_dir():  # deleted meanwhile: its files went, and so does this one
                    write_atomic(self.store.state_dir(key) / HISTORY_FILE, history.to_bytes())
        except Exception:  # the answer is out already; a history is a speed-up
            log.exception("%s: recording the answer in its history failed", key)

    def flush(self) -> None:
        """Wait for the histories being written (tests; shutdown)."""
        self._pool.submit(lambda: None).result()

    def close(self) -> None:
        self._pool.shutdown(wait=True)
