"""The ingestion side's recovery off the question's path: ingestions a restart (or a dead server
sharing the database) interrupted, resumed or settled (:func:`resume_interrupted`), and the disk
budget kept after a document became ready (:func:`keep_disk_budget`, on the ingestions' disk
worker), and whether a document's snapshots are all on disk (:func:`complete`).
What admission finds unusable is repaired by ``Ingestions.recover`` (server/engine/ingestion.py),
through the one repair path of damaged files (server/engine/repairs.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial

from ingest import snapshot
from ingest.errors import DocumentFilesDamaged, StorageError
from server.engine.repairs import Repairs
from store import disk
from store.docstore import FAILED, INGESTING, READY, DocStore

log = logging.getLogger("docqa.engine")


def complete(store: DocStore, doc_id: str) -> bool:
    """Every snapshot the document needs is on disk: its own, or each of its segments'."""
    return all(snapshot.describes(store.state_dir(k), store.read_prefix(k)) for k in store.keys(doc_id))


def keep_disk_budget(store: DocStore, budget: int, doc_id: str) -> None:
    """After ``doc_id`` became ready: evict the least recently used snapshots until the documents fit
    ``budget`` (store/disk.py ``evict``), never one of a document still being ingested (by any server
    sharing the store). Run off the engine thread; a failure is logged, never raised."""
    try:
        ingesting = {d.id for d in store.list() if d.status == INGESTING}
        disk.evict(store, budget, keep=frozenset({doc_id, *ingesting}))
    except Exception:
        log.exception("keeping DOCQA_DISK_BUDGET_BYTES after %s failed", doc_id)


_quiet: dict[str, bool] = {}  # the store's last check failed (its error is then logged once)


def resume_interrupted(
    store: DocStore,
    submit: Callable[[str, int], None],
    skip: Callable[[str], bool] = lambda doc_id: False,
    repairs: Repairs | None = None,
) -> None:
    """After a restart, and now and then (server/engine/lease.py): mark ready the documents whose
    snapshot was complete (ready could not be recorded), re-queue those that were mid-ingestion, or
    fail them with a reason; ``skip(doc_id)``: one whose prefill is queued or running here. Servers
    sharing the database (``store.owner``) take only the ingestions whose owner's lease ran out (it
    died): the others are still being prefilled by a live server. ``repairs``: a damaged segment list
    is repaired and read again (server/engine/repairs.py); else (or beyond repair) the document is
    marked failed with the action that fixes it."""
    try:
        if store.owner:
            interrupted = store.claim_stale(store.owner, store.lease_s)
        else:
            interrupted = [doc for doc in store.list() if doc.status == INGESTING]
    except StorageError as exc:  # the periodic check meets the outage every time: once in the log is enough
        (log.error if not _quiet.get("store") else log.debug)("could not look for interrupted ingestions: %s", exc)
        _quiet["store"] = True
        return
    _quiet["store"] = False
    for doc in interrupted:
        if skip(doc.id):
            continue
        try:
            keys = store.keys(doc.id) if repairs is None else repairs.read(doc.id, partial(store.keys, doc.id))
            if not all((store.state_dir(k) / "prefix.npy").is_file() for k in keys):
                store.set_status(doc.id, FAILED, "the server stopped before the upload was stored; upload again")
            elif complete(store, doc.id):
                log.info("%s: its snapshot is complete; marked ready", doc.id)
                store.set_status(doc.id, READY)
            else:
                log.info("resuming ingestion of %s", doc.id)
                submit(doc.id, doc.tokens)
        except StorageError as exc:  # a locked or full database: it stays as it is until the next start
            log.error("%s: could not record its state at start-up: %s", doc.id, exc)
        except DocumentFilesDamaged as exc:  # never a crash at start-up over one document's files
            log.error("%s: %s; marked failed", doc.id, exc)
            try:
                store.set_status(doc.id, FAILED, f"{exc}; {exc.action.format(id=doc.id)}")
            except StorageError:
                pass
