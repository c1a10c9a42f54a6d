"""create_app(settings): FastAPI app whose lifespan opens the store (sweeping what no row owns) and
starts and stops the engine thread.

Middleware, outermost first: request metrics; the Host check (server/api/guard.py ``TrustedHosts``);
CORS, when configured; the guard (request id, Origin, API key, body size and timeout: ``Guard``, same
module), all before routing and body parsing; HEAD as GET (server/api/head.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import FileResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.routing import Route

from ingest.errors import DataDirUnusable
from ingest.worker import ExtractionWorker
from server.api import handlers
from server.api.guard import Guard, TrustedHosts
from server.api.head import HeadAsGet
from server.api.mcp_http import PATH as MCP_PATH
from server.api.mcp_http import McpEndpoint
from server.api.metrics import CONTENT_TYPE, Metrics, RequestMetrics
from server.api.routes import collections, documents, health, openai
from server.config.memory import snapshot_estimate, with_preset
from server.config.settings import Settings
from server.engine.engine import Engine
from server.engine.lease import Leases, owner_name
from server.engine.selftest import SelfTest
from server.engine.traffic import TrafficLog
from server.service import Services, refit
from server.service.watch import FolderWatch
from store.docstore import DocStore
from store.stores import open_store as open_rows

log = logging.getLogger("docqa.store")
WEB_DIR = Path(__file__).resolve().parents[2] / "web"


def create_app(settings: Settings | None = None, selftest: SelfTest | None = None) -> FastAPI:
    """The app for ``settings``; ``selftest``: the start-up self-test's result, shown by /health."""
    settings = with_preset(settings or Settings())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = await asyncio.to_thread(open_store, settings.data_dir, settings.database_url, settings.startup_sweep)
        if settings.ingest_lease_s:  # servers sharing the database: ingest under leases (server/engine/lease.py)
            store.share(owner_name(settings.replica_name), settings.ingest_lease_s)
        traffic = TrafficLog(settings) if settings.traffic_log else None
        extractor = ExtractionWorker(
            settings.extract_timeout_s,
            settings.extract_memory_bytes,
            settings.debug_text_rules,
            workers=settings.extract_workers,
            queue=settings.extract_queue,
            max_waiting_bytes=settings.extract_queue_bytes,
            ocr=settings.ocr_settings(),
        )
        # A damaged file is repaired by the engine's one repair path, with the extractor passed to it
        # (server/engine/repairs.py): nothing is assigned onto the store.
        engine = Engine(settings, store, observer=metrics, traffic=traffic, extract=extractor.extract)
        # Resumes stranded ingestions (and renews leases when servers share the database).
        leases = Leases(store, engine.submit_ingest, engine.is_reading, settings.resume_check_s)
        extractor.prestart()
        await asyncio.to_thread(engine.start)
        # The service room's one value (server/service/__init__.py): the routes reach it through
        # server/api/deps.py, the watched folders and re-reads are given it.
        services = app.state.services = Services(
            settings, store, engine, extractor, snapshot_estimate(settings, engine.model.path)
        )
        await asyncio.to_thread(lambda: engine.model.max_token_chars)  # read the vocabulary once, now
        metrics.bind(engine, store)
        # Documents read for a larger context than this one (DOCQA_N_CTX lowered): marked, and with
        # DOCQA_REINGEST_UNFIT read again after start-up (server/service/refit.py).
        engine.mark_unfit(await asyncio.to_thread(refit.scan, store, settings))
        rereads = None
        if settings.reingest_unfit and engine.unfit_ids():
            rereads = asyncio.create_task(
                refit.reingest_all(
                    engine.unfit_ids,
                    lambda doc_id: asyncio.to_thread(store.get, doc_id),
                    lambda doc: documents.reingest_document(services, doc),
                )
            )
        if leases is not None:
            leases.start()
        watch = app.state.watch = FolderWatch(services, settings) if settings.watch else None
        if watch is not None:  # DOCQA_WATCH: folders kept in sync (server/service/watch.py)
            watch.start()
        try:
            yield
        finally:
            if rereads is not None:
                rereads.cancel()
            if watch is not None:
                await watch.stop()
            if mcp is not None:
                await mcp.close()
            if leases is not None:
                leases.stop()
            extractor.close()
            await asyncio.to_thread(engine.stop)
            if traffic is not None:
                traffic.close()
            await asyncio.to_thread(store.close)

    app = FastAPI(title="docqa", version="0.1.0", lifespan=lifespan)
    app.state.settings = settings
    app.state.selftest = selftest
    metrics = app.state.metrics = Metrics()
    handlers.install(app)
    app.include_router(health.router)
    app.include_router(documents.router)
    app.include_router(collections.router)
    app.include_router(openai.router)
    mcp = app.state.mcp = McpEndpoint(app) if settings.mcp_http else None
    if mcp is not None:  # MCP over streamable HTTP (server/api/mcp_http.py), behind the same middleware
        app.router.routes.append(Route(MCP_PATH, mcp, methods=["GET", "POST", "DELETE"], include_in_schema=False))

    @app.get("/metrics", include_in_schema=False)
    def prometheus() -> Response:  # sync: the snapshot bytes on disk are counted in the thread pool
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    add_page_and_guards(app, settings, metrics)
    return app


#: The page's files are revalidated on every load (their ETag then answers 304): without a
#: Cache-Control a browser keeps them by heuristic freshness (RFC 9111 4.2.2: a tenth of their age,
#: days for files last changed weeks ago), so a new docqa at the same address showed an earlier one's
#: scripts and words ("docqa reads .pdf, .txt and .md files", issue 39 item 2).
PAGE_CACHE = {"Cache-Control": "no-cache"}


class PageFiles(StaticFiles):
    """``/static``: the page's scripts, styles and vendored libraries, with :data:`PAGE_CACHE`."""

    def file_response(self, *args, **kwargs) -> Response:
        response = super().file_response(*args, **kwargs)
        response.headers.update(PAGE_CACHE)
        return response


def add_page_and_guards(app: FastAPI, settings: Settings, metrics: Metrics) -> None:
    """The web page, and the middleware every request passes before routing (also the cluster's
    ingress, cluster/ingress.py). Call after the routes."""
    app.mount("/static", PageFiles(directory=WEB_DIR), name="static")

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(WEB_DIR / "index.html", headers=PAGE_CACHE)

    app.add_middleware(HeadAsGet)  # the last added runs first
    app.add_middleware(Guard, settings=settings)
    if settings.cors_origins:  # off unless configured
        app.add_middleware(
            CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["*"], allow_headers=["*"]
        )
    app.add_middleware(TrustedHosts, settings=settings)
    app.add_middleware(RequestMetrics, metrics=metrics)


def open_store(data_dir: Path, database_url: str | None = None, sweep: bool = True) -> DocStore:
    """The document store (PostgreSQL at ``database_url``, else SQLite in ``data_dir``), after the
    sweep of directories without a row and stray temp files (a crash, a full disk), reported in the
    log. Raises DataDirUnusable naming the directory."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataDirUnusable(
            f"cannot create the data directory {data_dir.resolve()} ({exc.strerror}); create it, or set DOCQA_DATA_DIR"
        ) from exc
    store = open_rows(data_dir, database_url)
    if not sweep:  # servers sharing the data directory: another one may be writing right now
        return store
    swept = store.sweep((doc.id for doc in store.list()), (c.id for c in store.collections()))
    if swept.dirs or swept.tmp_files:
        log.warning(
            "start-up sweep freed %d bytes: %d directories without a row (%s), %d temp files (%s)",
            swept.bytes_freed,
            len(swept.dirs),
            ", ".join(swept.dirs),
            len(swept.tmp_files),
            ", ".join(str(p) for p in swept.tmp_files),
        )
    return store
