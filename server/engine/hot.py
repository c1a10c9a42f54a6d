"""Hot documents: what the document sequence holds, and the RAM cache of document states.

Entries are keyed by ingest/segments.key: a document, or one segment of a segmented document (each
segment has its own prefix, state and snapshot, and is restored like a document).

The document sequence (``seq_id``, 0 in the engine) holds exactly one document's prefix, never
decoded into by a question; questions share it by ``seq_cp``. It is filled by an ingestion
(server/engine/ingestion.py) or by bringing a document in: from its RAM state while it is hot (LRU within
``snapshot_ram_bytes``, and at most ``hot_docs`` documents when set), else from its snapshot on disk.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ingest import snapshot
from ingest.locate import Locator
from ingest.segments import parse_key
from ingest.store import DocStore
from runtime.llama import Context, Model
from server.config.settings import Settings
from server.engine.companions import NONE, Companions
from spec.cite import CitationIndex, TokenOffsets
from spec.history import AnswerHistory
from spec.lookup import NgramIndex


@dataclass(slots=True)
class HotDoc:
    """A document kept in RAM: prefix ids, lookup index, and (budget allowing) its state bytes."""

    prefix: np.ndarray  # int32 [n_prefix]
    index: NgramIndex
    state: bytes | None
    mtp_state: bytes | None = None  # the MTP context's part (models drafting with MTP)
    mtp_h: np.ndarray | None = None  # target hidden state of the last prefix token [n_embd]
    citations: tuple[CitationIndex, TokenOffsets, Locator] | None = None  # built at the first answer
    prefilled: bool = False  # made by an ingestion here and not yet asked about
    history: AnswerHistory | None = None  # earlier answers about it (server/engine/history.py); None: off

    @property
    def ram_bytes(self) -> int:
        return len(self.state or b"") + len(self.mtp_state or b"")


class HotDocs:
    """The document sequence and the RAM cache. Engine thread only."""

    MAX_ENTRIES = 64

    def __init__(
        self,
        settings: Settings,
        store: DocStore,
        model: Model,
        ctx: Context,
        mtp_ctx: Context | None,
        seq_id: int,
        load_history: Callable[[str], AnswerHistory | None] = lambda key: None,
        companions: Companions = NONE,
    ) -> None:
        """``load_history(key)``: a document's answer history, read when its entry is made;
        ``companions``: contexts that follow the document sequence (server/engine/companions.py)."""
        self.settings, self.store, self.model = settings, store, model
        self.load_history, self.companions = load_history, companions
        self.ctx, self.mtp_ctx, self.seq_id = ctx, mtp_ctx, seq_id
        self.loaded: str | None = None  # the document whose prefix the sequence holds, exactly (see hold())
        self.n_loaded = 0  # its prefix tokens (0: none)
        self._hot: OrderedDict[str, HotDoc] = OrderedDict()

    def hold(self, key: str | None, n_tokens: int = 0) -> None:
        """Record what the document sequence now holds: ``key``'s prefix of ``n_tokens`` (None: nothing
        the engine may reuse)."""
        self.loaded, self.n_loaded = key, (n_tokens if key is not None else 0)

    def adopt(self, doc_id: str, seq_id: int) -> None:
        """Make the document sequence hold what ``seq_id`` holds (the prefix of ``doc_id``, just
        ingested there): its cells are shared, not copied (unified KV); ``seq_id`` keeps them too."""
        self.clear()
        self.ctx.seq_cp(seq_id, self.seq_id, 0, -1)
        if self.mtp_ctx is not None:
            self.mtp_ctx.seq_cp(seq_id, self.seq_id, 0, -1)
        self.companions.adopt(doc_id, seq_id)
        self.hold(doc_id, len(self._hot[doc_id].prefix))

    def clear(self) -> None:
        """Empty the document sequence in both contexts."""
        self.hold(None)
        self.ctx.seq_rm(self.seq_id, 0)
        if self.mtp_ctx is not None:
            self.mtp_ctx.seq_rm(self.seq_id, 0)
        self.companions.clear()

    def get(self, doc_id: str) -> HotDoc | None:
        return self._hot.get(doc_id)

    def drop(self, doc_id: str) -> None:
        """A deleted document: forget its RAM entries, its segments' too (the sequence may still serve
        active answers)."""
        for key in [k for k in self._hot if parse_key(k)[0] == doc_id]:
            del self._hot[key]
        if self.loaded is not None and parse_key(self.loaded)[0] == doc_id:
            self.hold(None)

    def evict(self, doc_id: str) -> None:
        """Free the document's RAM states, its segments' too; the sequence keeps it if it holds it (no
        answer is cut)."""
        for key in [k for k in self._hot if parse_key(k)[0] == doc_id]:
            del self._hot[key]

    def remember(
        self,
        doc_id: str,
        prefix: np.ndarray,
        state: bytes | None = None,
        mtp_state: bytes | None = None,
        mtp_h: np.ndarray | None = None,
    ) -> HotDoc:
        """Put a document in the RAM cache (LRU by state bytes, the newest kept)."""
        s = self.settings
        hot = self._hot.pop(doc_id, None)
        if hot is None or not np.array_equal(hot.prefix, prefix):  # new, or re-ingested with new tokens
            hot = HotDoc(prefix=prefix, index=NgramIndex(prefix, s.min_ngram, s.max_ngram), state=None)
            hot.history = self.load_history(doc_id)
        if state is not None and (self.mtp_ctx is None or mtp_state is not None):
            hot.state, hot.mtp_state = state, mtp_state
        if mtp_h is not None:
            hot.mtp_h = mtp_h
        self._hot[doc_id] = hot
        total = sum(h.ram_bytes for h in self._hot.values())
        for old_id, old in list(self._hot.items())[:-1]:
            if total <= s.snapshot_ram_bytes and len(self._hot) <= (s.hot_docs or self.MAX_ENTRIES):
                break
            total -= old.ram_bytes
            del self._hot[old_id]
        return hot

    def restore(self, doc_id: str) -> tuple[HotDoc, str]:  # doc_id: a document or segment key
        """The document's RAM entry, with the sequence holding exactly its prefix (in the MTP context
        too): as it is if already loaded, else from the RAM state, else from the disk snapshot; and
        where it was found, for the answer's stats: "hot" (the sequence or RAM), "restored" (the disk
        snapshot) or "prefilled" (an ingestion here, and this is its first question).

        Raises snapshot.SnapshotIncompatible / SnapshotMissing (ingest/snapshot.py).
        """
        ctx, seq = self.ctx, self.seq_id
        source = "hot"
        snapshot.touch(self.store.state_dir(doc_id))  # a use, for the disk budget's least-recently-used eviction
        hot = self._hot.get(doc_id)
        if hot is None:
            hot = self.remember(doc_id, self.store.read_prefix(doc_id))
        else:
            self._hot.move_to_end(doc_id)
            if hot.prefilled:
                source, hot.prefilled = "prefilled", False
        if self.loaded == doc_id:
            return hot, source
        n = len(hot.prefix)
        self.hold(None)
        if hot.state is not None:
            ctx.state_set(hot.state, seq)
            if self.mtp_ctx is not None and hot.mtp_state is not None:
                self.mtp_ctx.state_set(hot.mtp_state, seq)
            if self.holds_prefix(n):
                self.hold(doc_id, n)
                self.companions.restore(doc_id, hot.prefix, self.store.state_dir(doc_id))
                return hot, source
            hot.state = hot.mtp_state = None  # unusable; fall back to disk
        with self.store.holding(parse_key(doc_id)[0]):  # not evicted nor deleted while it loads
            mtp_h = snapshot.load(ctx, seq, hot.prefix, self.store.state_dir(doc_id), self.mtp_ctx)
        if not self.holds_prefix(n):
            raise snapshot.SnapshotRefused("the restored state does not end at the document prefix")
        self.remember(doc_id, hot.prefix, *self.states_for_ram(), mtp_h)
        self.hold(doc_id, n)
        self.companions.restore(doc_id, hot.prefix, self.store.state_dir(doc_id))
        return hot, "restored"

    def states_for_ram(self, seq: int | None = None) -> tuple[bytes | None, bytes | None]:
        """The state bytes (target, MTP) of ``seq`` (default: the document sequence) if they fit the
        RAM budget (checked before copying: a 139k-token state of a 27B model is gigabytes)."""
        seq = self.seq_id if seq is None else seq
        size = self.ctx.state_size(seq) + (self.mtp_ctx.state_size(seq) if self.mtp_ctx else 0)
        if size > self.settings.snapshot_ram_bytes:
            return None, None
        return self.ctx.state_get(seq), (self.mtp_ctx.state_get(seq) if self.mtp_ctx else None)

    def holds_prefix(self, n: int) -> bool:
        """The sequence ends at position n - 1 and still holds the cells the next token attends to."""
        if self.ctx.pos_max(self.seq_id) != n - 1:
            return False
        pos_min = self.ctx.pos_min(self.seq_id)
        if self.model.n_swa > 0:  # the sliding window must still reach back n_swa positions
            return 0 <= pos_min <= max(0, n - self.model.n_swa + 1)
        # A recurrent state reports only its last position; attention caches must start at 0.
        return self.model.is_recurrent or pos_min == 0
