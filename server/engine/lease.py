"""Ingestion leases for servers sharing one database and data directory (a cluster's reader replicas,
or several docqa processes behind one load balancer; ``DOCQA_INGEST_LEASE_S``).

Each document a server ingests names it as ``owner`` with a lease (ingest/store.py). A thread here
renews this server's leases every third of the lease, and takes over the ingestions whose owner's
lease ran out, a server that died mid-prefill: each is marked ready (its snapshot was complete),
failed (its upload never reached the disk) or prefilled again here (server/engine/ingestion.py,
``resume_interrupted``), so no document stays ``ingesting`` forever.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable

from ingest.errors import StorageError
from ingest.store import DocStore
from server.engine.ingestion import resume_interrupted

log = logging.getLogger("docqa.lease")


def owner_name(replica_name: str | None) -> str:
    """This server's name as an owner: unique among the processes sharing the database."""
    return replica_name or f"{socket.gethostname()}:{os.getpid()}"


class Leases:
    def __init__(self, store: DocStore, submit: Callable[[str, int], None]) -> None:
        self.store, self.submit = store, submit
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="docqa-leases", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        period = max(self.store.lease_s / 3, 0.1)
        while not self._stop.wait(period):
            try:
                self.store.renew(self.store.owner, self.store.lease_s)
            except StorageError as exc:  # the database is away: the leases may run out; others take over
                log.warning("could not renew ingestion leases: %s", exc)
                continue
            resume_interrupted(self.store, self.submit)
