"""No ingestion left stranded: a thread that, every few seconds, resumes the documents that are
``ingesting`` with no prefill queued or running for them here (``resume_interrupted``: marked ready
when their snapshot is complete, prefilled again otherwise).

A document can be left so by a write of ``ready`` that failed while its store was away (its
snapshot is complete), or by an ingestion given up on for a reason a retry would not fix (issue 27:
a document stayed ``ingesting`` at 41 % until a restart). Servers sharing one database and data
directory (a cluster's reader replicas, several docqa processes behind one load balancer;
``DOCQA_INGEST_LEASE_S``) also renew their leases here: each document a server ingests names it as
``owner`` with a lease (store/docstore.py), and the ingestions whose owner's lease ran out (a server
that died mid-prefill) are taken over the same way.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable

from ingest.errors import StorageError
from server.engine.recovery import resume_interrupted
from store.docstore import DocStore

log = logging.getLogger("docqa.lease")


def owner_name(replica_name: str | None) -> str:
    """This server's name as an owner: unique among the processes sharing the database."""
    return replica_name or f"{socket.gethostname()}:{os.getpid()}"


class Leases:
    """``busy(doc_id)``: a prefill of the document is queued or running here; ``period_s``: seconds
    between checks (a third of the lease when servers share the database)."""

    def __init__(
        self, store: DocStore, submit: Callable[[str, int], None], busy: Callable[[str], bool], period_s: float
    ) -> None:
        self.store, self.submit, self.busy = store, submit, busy
        self.period_s = max(store.lease_s / 3, 0.1) if store.owner else period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="docqa-leases", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            if self.store.owner:
                try:
                    self.store.renew(self.store.owner, self.store.lease_s)
                except StorageError as exc:  # the database is away: the leases may run out; others take over
                    log.warning("could not renew ingestion leases: %s", exc)
                    continue
            try:
                resume_interrupted(self.store, self.submit, skip=self.busy)
            except Exception:  # the check runs again in a moment; it must never end the thread
                log.exception("looking for stranded ingestions failed")
