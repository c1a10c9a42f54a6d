"""Disk space: what a new document will take, the free-space check before it is accepted, the disk
budget (least recently used snapshots are evicted, their text kept), and OSError -> typed errors.

A snapshot is most of a document's bytes (the KV cache of every prefix token), so an upload is
accepted only when the free space covers the upload, its text, its token ids and the snapshot it
will have (the memory planner's bytes per token, server/config/memory.py). With DOCQA_DISK_BUDGET_BYTES the
documents directory is kept within the budget by evicting snapshots; an evicted document stays
``ready`` and is prefilled again when it is next asked about.
"""

from __future__ import annotations

import errno
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

from ingest import snapshot
from ingest.errors import DiskFull, StorageError, StorageFailed
from store.files import DocFiles

log = logging.getLogger("docqa.store")
#: Room kept besides a document's own files: SQLite's journal, manifests, a temp file next to the
#: file it replaces.
MARGIN_BYTES = 8 * 1024**2


def mib(n: int) -> str:
    return f"{n / 1024**2:.1f} MiB"


@dataclass(frozen=True, slots=True)
class Need:
    """Bytes a new document will take on disk."""

    upload: int
    text: int  # text.json: the UTF-8 text, its page map, the JSON escapes
    prefix: int  # prefix.npy: 4 bytes per token
    snapshot: int  # the planner's estimate of state.bin (+ the MTP part)

    @property
    def total(self) -> int:
        return self.upload + self.text + self.prefix + self.snapshot + MARGIN_BYTES

    def describe(self) -> str:
        return (
            f"{mib(self.total)}: upload {mib(self.upload)}, text {mib(self.text)}, token ids {mib(self.prefix)}, "
            f"snapshot {mib(self.snapshot)}, margin {mib(MARGIN_BYTES)}"
        )


def check_free(directory: Path, need: Need) -> None:
    """Raise DiskFull unless the filesystem of ``directory`` has ``need.total`` bytes free."""
    free = shutil.disk_usage(directory).free
    if free < need.total:
        raise DiskFull(
            f"storing this document needs about {need.describe()}; the data directory's disk has {mib(free)} "
            "free. Free space (delete documents you no longer need), then upload it again"
        )


def make_room(files: DocFiles, need: Need, budget: int | None, keep: frozenset[str] = frozenset()) -> list[str]:
    """Before storing a new document: within ``budget`` (DOCQA_DISK_BUDGET_BYTES), evict least recently
    used snapshots until it fits (never those of ``keep``: documents still being ingested); then check
    the free space. A document that would be refused anyway is refused before anything is evicted
    (issue 27: a refused upload had evicted every snapshot first). Returns the evicted ids; raises
    DiskFull."""
    evicted: list[str] = []
    if budget is not None:
        used = files.usage()
        evictable = sum(snapshot_size(files, d) for d in snapshot.least_recently_used(files.docs_dir) if d not in keep)
        if used - evictable + need.total > budget:
            raise DiskFull(
                f"storing this document needs about {need.describe()}, and the documents already take "
                f"{mib(used - evictable)} (without the snapshots that could be evicted) of DOCQA_DISK_BUDGET_BYTES "
                f"{mib(budget)}. Delete documents you no longer need, or raise the budget"
            )
        evicted = evict(files, budget, need.total, keep)
    check_free(files.root, need)
    return evicted


def snapshot_size(files: DocFiles, doc_id: str) -> int:
    """Bytes eviction would free for ``doc_id``: its snapshot's files and its segments'."""
    directory = files.dir(doc_id)
    names = ("state.bin", "mtp.bin", "mtp_h.npy", "state.json", "draft.bin", "draft.json")
    paths = [directory / n for n in names] + [p for n in names for p in directory.glob(f"segments/*/{n}")]
    total = 0
    for path in paths:
        try:
            total += path.stat().st_size
        except FileNotFoundError:
            pass
    return total


def evict(files: DocFiles, budget: int, need: int = 0, keep: frozenset[str] = frozenset()) -> list[str]:
    """Remove the least recently used snapshots (:func:`snapshot.last_used`) until the documents
    directory plus ``need`` bytes fits ``budget``; never those of ``keep``. Returns the evicted ids."""
    used = files.usage()
    evicted: list[str] = []
    if used + need <= budget:
        return evicted
    for doc_id in snapshot.least_recently_used(files.docs_dir):
        if doc_id in keep:
            continue
        with files.holding(doc_id) as directory:
            used -= snapshot.remove_all(directory)
        evicted.append(doc_id)
        if used + need <= budget:
            break
    if evicted:
        log.info("evicted the snapshots of %s to stay within DOCQA_DISK_BUDGET_BYTES", ", ".join(evicted))
    return evicted


def storage_error(exc: OSError, doing: str) -> StorageError:
    """``exc``, raised while ``doing``, as the error the client gets (no path: that is for the log)."""
    log.error("%s failed: %s", doing, exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskFull(f"the disk is full: {doing} failed ({exc.strerror}); free space in the data directory")
    return StorageFailed(f"{doing} failed ({exc.strerror or type(exc).__name__}); see the server log")
