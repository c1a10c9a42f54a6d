"""create_app(settings): FastAPI app whose lifespan starts and stops the engine thread."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import Depends, FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import FileResponse, Response
from fastapi.staticfiles import StaticFiles

from ingest.store import DocStore
from ingest.worker import ExtractionWorker
from server import errors
from server.deps import require_api_key
from server.engine import Engine
from server.head import HeadAsGet
from server.limits import UploadLimit
from server.memory import with_preset
from server.metrics import CONTENT_TYPE, Metrics, RequestMetrics
from server.routes import answers, documents, health, openai
from server.selftest import SelfTest
from server.settings import Settings
from server.traffic import TrafficLog

WEB_DIR = Path(__file__).resolve().parent.parent / "web"


def create_app(settings: Settings | None = None, selftest: SelfTest | None = None) -> FastAPI:
    """The app for ``settings``; ``selftest``: the start-up self-test's result, shown by /health."""
    settings = with_preset(settings or Settings())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        store = DocStore(settings.data_dir)
        traffic = TrafficLog(settings) if settings.traffic_log else None
        engine = Engine(settings, store, observer=metrics, traffic=traffic)
        app.state.store = store
        app.state.engine = engine
        extractor = app.state.extractor = ExtractionWorker(
            settings.extract_timeout_s,
            settings.extract_memory_bytes,
            settings.text_rules,
            workers=settings.extract_workers,
            queue=settings.extract_queue,
        )
        extractor.prestart()
        await asyncio.to_thread(engine.start)
        metrics.bind(engine, store)
        try:
            yield
        finally:
            app.state.extractor.close()
            await asyncio.to_thread(engine.stop)
            if traffic is not None:
                traffic.close()
            store.close()

    app = FastAPI(title="docqa", version="0.1.0", lifespan=lifespan)
    app.state.settings = settings
    app.state.selftest = selftest
    metrics = app.state.metrics = Metrics()
    errors.install(app)
    app.include_router(health.router)
    guarded = [Depends(require_api_key)] if settings.api_key else []
    app.include_router(documents.router, dependencies=guarded)
    app.include_router(answers.router, dependencies=guarded)
    app.include_router(openai.router, dependencies=guarded)
    app.mount("/static", StaticFiles(directory=WEB_DIR), name="static")

    @app.get("/metrics", include_in_schema=False)
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(WEB_DIR / "index.html")

    app.add_middleware(UploadLimit, max_bytes=settings.max_upload_bytes)
    app.add_middleware(HeadAsGet)
    app.add_middleware(RequestMetrics, metrics=metrics)
    if settings.cors_origins:  # off unless configured
        app.add_middleware(
            CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["*"], allow_headers=["*"]
        )
    return app
