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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from weakref import WeakSet

import numpy as np

from ingest import snapshot
from ingest.segments import parse_key
from runtime.llama import Model
from server.engine.contexts import Contexts, RamState
from store.docstore import DocStore


@dataclass(slots=True, eq=False, weakref_slot=True)
class HotDoc:
    """A document kept in RAM: prefix ids and (budget allowing) its state bytes. What features build
    for it (the lookup index, the citation index, the quote index, the answer history) they keep
    themselves, keyed weakly by this entry, so it goes when the entry goes."""

    prefix: np.ndarray  # int32 [n_prefix]
    state: bytes | None  # the target's state of the document sequence (None: not kept in RAM)
    parts: dict[str, bytes] = field(default_factory=dict)  # the companions' states, by name (with ``state``)
    last_hidden: np.ndarray | None = None  # the target's hidden state after the last prefix token [n_embd]

    @property
    def ram_bytes(self) -> int:
        return len(self.state or b"") + sum(len(p) for p in self.parts.values())


class HotDocs:
    """The document sequence and the RAM cache. Engine thread only.

    ``ram_bytes``: the RAM cache's budget of state bytes (DOCQA_SNAPSHOT_RAM_BYTES); ``hot_docs``: the
    most documents kept (None: :data:`MAX_ENTRIES`)."""

    MAX_ENTRIES = 64

    def __init__(
        self,
        contexts: Contexts,
        store: DocStore,
        model: Model,
        seq_id: int,
        *,
        ram_bytes: int = 0,
        hot_docs: int | None = None,
        on_new: Sequence[Callable[[str, HotDoc], None]] = (),
    ) -> None:
        """``on_new``: each called as ``(key, hot)`` when an entry is made (the features that keep
        something per entry attach theirs: the lookup index, the answer history)."""
        self.contexts, self.store, self.model, self.seq_id = contexts, store, model, seq_id
        self.ram_budget, self.hot_docs = ram_bytes, hot_docs
        self.on_new = on_new
        self.loaded: str | None = None  # the document whose prefix the sequence holds, exactly (see hold())
        self.n_loaded = 0  # its prefix tokens (0: none)
        self._hot: OrderedDict[str, HotDoc] = OrderedDict()
        self._prefilled: WeakSet[HotDoc] = WeakSet()  # made by an ingestion here and not yet asked about

    def hold(self, key: str | None, n_tokens: int = 0) -> None:
        """Record what the document sequence now holds: ``key``'s prefix of ``n_tokens`` (None: nothing
        the engine may reuse)."""
        self.loaded, self.n_loaded = key, (n_tokens if key is not None else 0)

    def adopt(self, doc_id: str, seq_id: int) -> None:
        """Make the document sequence hold what ``seq_id`` holds (the prefix of ``doc_id``, just
        ingested there): its cells are shared, not copied (unified KV); ``seq_id`` keeps them too."""
        self.clear()
        self.contexts.target.seq_cp(seq_id, self.seq_id, 0, -1)
        self.contexts.companions.adopt(doc_id, seq_id)
        self.hold(doc_id, len(self._hot[doc_id].prefix))

    def clear(self) -> None:
        """Empty the document sequence in every context."""
        self.hold(None)
        self.contexts.target.seq_rm(self.seq_id, 0)
        self.contexts.companions.clear()

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
        ram: RamState | None = None,
        last_hidden: np.ndarray | None = None,
        prefilled: bool = False,
    ) -> HotDoc:
        """Put a document in the RAM cache (LRU by state bytes, the newest kept); ``prefilled``: by an
        ingestion here, so its first question finds it "prefilled" (:meth:`restore`)."""
        hot = self._hot.pop(doc_id, None)
        if hot is None or not np.array_equal(hot.prefix, prefix):  # new, or re-ingested with new tokens
            hot = HotDoc(prefix=prefix, state=None)
            for attach in self.on_new:
                attach(doc_id, hot)
        if prefilled:
            self._prefilled.add(hot)
        if ram is not None:
            hot.state, hot.parts = ram
        if last_hidden is not None:
            hot.last_hidden = last_hidden
        self._hot[doc_id] = hot
        total = sum(h.ram_bytes for h in self._hot.values())
        for old_id, old in list(self._hot.items())[:-1]:
            if total <= self.ram_budget and len(self._hot) <= (self.hot_docs or self.MAX_ENTRIES):
                break
            total -= old.ram_bytes
            del self._hot[old_id]
        return hot

    def restore(self, doc_id: str) -> tuple[HotDoc, str]:  # doc_id: a document or segment key
        """The document's RAM entry, with the sequence holding exactly its prefix (in every context):
        as it is if already loaded, else from the RAM state, else from the disk snapshot; and where it
        was found, for the answer's stats: "hot" (the sequence or RAM), "restored" (the disk snapshot)
        or "prefilled" (an ingestion here, and this is its first question).

        Raises snapshot.SnapshotIncompatible / SnapshotMissing (ingest/snapshot.py).
        """
        contexts, seq, directory = self.contexts, self.seq_id, self.store.state_dir(doc_id)
        source = "hot"
        snapshot.touch(directory)  # a use, for the disk budget's least-recently-used eviction
        hot = self._hot.get(doc_id)
        if hot is None:
            hot = self.remember(doc_id, self.store.read_prefix(doc_id))
        else:
            self._hot.move_to_end(doc_id)
            if hot in self._prefilled:
                source = "prefilled"
                self._prefilled.discard(hot)
        if self.loaded == doc_id:
            return hot, source
        n = len(hot.prefix)
        self.hold(None)
        if hot.state is not None:
            contexts.set_ram_state((hot.state, hot.parts), seq)
            if self.holds_prefix(n):
                self.hold(doc_id, n)
                contexts.companions.restore(doc_id, hot.prefix, directory, hot.parts, hot.last_hidden)
                return hot, source
            hot.state, hot.parts = None, {}  # unusable; fall back to disk
        with self.store.holding(parse_key(doc_id)[0]):  # not evicted nor deleted while it loads
            last_hidden = contexts.load(seq, hot.prefix, directory)
        if not self.holds_prefix(n):
            raise snapshot.SnapshotRefused("the restored state does not end at the document prefix")
        self.remember(doc_id, hot.prefix, self.ram_state(), last_hidden)
        self.hold(doc_id, n)
        contexts.companions.restore(doc_id, hot.prefix, directory, {}, last_hidden)
        return hot, "restored"

    def ram_state(self, seq: int | None = None, reading: bool = False) -> RamState | None:
        """The state of ``seq`` (default: the document sequence) in every context, if it fits the RAM
        budget; ``reading``: a reading just ended there, the target's part taken from the reading
        context (server/engine/contexts.py)."""
        return self.contexts.ram_state(self.seq_id if seq is None else seq, self.ram_budget, reading)

    def holds_prefix(self, n: int) -> bool:
        """The sequence ends at position n - 1 and still holds the cells the next token attends to."""
        ctx = self.contexts.target
        if ctx.pos_max(self.seq_id) != n - 1:
            return False
        pos_min = ctx.pos_min(self.seq_id)
        if self.model.n_swa > 0:  # the sliding window must still reach back n_swa positions
            return 0 <= pos_min <= max(0, n - self.model.n_swa + 1)
        # A recurrent state reports only its last position; attention caches must start at 0.
        return self.model.is_recurrent or pos_min == 0
