"""The reader deployment: one replica is today's server (server/api/app.py: engine thread, store, routes)
on one GPU, or on CPU cores, answering the requests the ingress forwards.

Routing by document is Ray Serve's model multiplexing, where the "model" is a document's state: the
ingress sends each question with ``multiplexed_model_id=<document id>``, Serve routes it to a
replica that holds that document (:meth:`Reader.hold`, at most ``DOCQA_HOT_DOCS`` per replica, least
recently used given up first), and a replica that gives one up frees its RAM state. A document new to
a replica is restored from its snapshot in the shared data directory (``DOCQA_DATA_DIR``); metadata
is in PostgreSQL (``DOCQA_DATABASE_URL``). An upload is held by the replica that ingested it, so its
first questions find it there, hot.

Settings come from the ``DOCQA_*`` environment (the Serve config's ``runtime_env``); each replica
names itself in every answer's stats (``replica``) and ingests under a lease (server/engine/lease.py), so
an ingestion its death interrupts is resumed by another replica.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator

from ray import serve

from cluster.asgi import ProxiedRequest, call
from cluster.metrics import Publisher
from server.api.app import create_app
from server.api.deps import metrics_of, services_of
from server.config.settings import Settings

log = logging.getLogger("docqa.cluster")
#: Document states a replica keeps hot (Serve's max_num_models_per_replica). Read at import, since
#: the decorator needs it then: set it in the Serve config's runtime_env.
HOT_DOCS = Settings().hot_docs or 2
DEFAULT_LEASE_S = 15.0
_UPLOAD = re.compile(r"^/v1/documents/?$")


class HeldDocument:
    """A document this replica holds for Serve's routing; letting go frees its RAM state."""

    def __init__(self, doc_id: str, engine) -> None:
        self.doc_id, self._engine = doc_id, engine

    def __del__(self) -> None:
        """Serve calls it when the replica gives the document up (LRU); the garbage collector calls
        it again, which must not evict the document once it is held anew."""
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.evict(self.doc_id)


@serve.deployment(
    name="Reader",
    ray_actor_options={"num_cpus": 1},
    max_ongoing_requests=64,
    health_check_period_s=5,
    graceful_shutdown_timeout_s=15,
)
class Reader:
    async def __init__(self) -> None:
        context = serve.get_replica_context()
        env = Settings()
        self.name = f"{context.deployment}#{context.replica_id.unique_id}"
        settings = env.model_copy(
            update={
                "replica_name": self.name,
                "startup_sweep": False,  # other replicas write into the shared directory meanwhile
                "ingest_lease_s": env.ingest_lease_s or DEFAULT_LEASE_S,
                "hot_docs": HOT_DOCS,  # the engine's RAM cache holds what Serve routes here, no more
            }
        )
        self.app = create_app(settings)
        self._life = self.app.router.lifespan_context(self.app)
        await self._life.__aenter__()  # opens the store, loads the model, starts the engine thread
        self._metrics = Publisher(settings.data_dir, self.name, metrics_of(self.app).render)
        self._metrics.start()
        log.info("reader %s ready (%d hot documents)", self.name, HOT_DOCS)

    @serve.multiplexed(max_num_models_per_replica=HOT_DOCS)
    async def hold(self, doc_id: str) -> HeldDocument:
        return HeldDocument(doc_id, services_of(self.app).engine)

    async def forward(self, req: ProxiedRequest) -> AsyncIterator[dict | bytes]:
        """The request through this replica's app: ``{"status", "headers"}``, then body chunks."""
        if doc_id := serve.get_multiplexed_model_id():
            await self.hold(doc_id)
        upload = req.method == "POST" and _UPLOAD.match(req.path) is not None
        status, body = 0, b""
        async for part in call(self.app, req):
            if isinstance(part, dict):
                status = part["status"]
            elif upload:
                body += part
            yield part
        if upload and status in (200, 202):  # the new document is hot here: route its questions here
            await self.hold(json.loads(body)["id"])

    async def __del__(self) -> None:
        self._metrics.stop()
        await self._life.__aexit__(None, None, None)  # stops the engine and closes the store
