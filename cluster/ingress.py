"""The ingress deployment: the single-machine HTTP API in front of the reader replicas.

Every request first passes the same middleware as on one machine (server/api/app.py: Host check, CORS,
request id, Origin, API key, body size and read timeout), then goes whole to a reader replica, whose
response streams back unchanged, SSE included. A request about one document (its answers, its
reingest, a chat completion naming it) carries the document id as Serve's multiplexed model id, so
it reaches a replica that holds the document hot; anything else goes to any replica.

A reader that dies before its response starts gives 503 with ``Retry-After``; one that dies mid-
stream ends the stream with an ``error`` event (``replica_failed``), so no client hangs. Serve routes
the next question about the document to a live replica, which restores it from the shared snapshot,
and restarts the dead one.
"""

# No `from __future__ import annotations`: Serve's ingress re-binds the route methods, and FastAPI
# must see `Request` itself, not a string, to inject the request.
import json
import logging
import re
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from ray import serve
from ray.serve.handle import DeploymentHandle

from cluster.asgi import ProxiedRequest
from cluster.metrics import gather
from server.api import handlers
from server.api.app import add_page_and_guards
from server.api.metrics import CONTENT_TYPE, Metrics
from server.config import errors
from server.config.settings import Settings

log = logging.getLogger("docqa.cluster")
RETRY_AFTER_S = "2"
_BY_DOCUMENT = re.compile(r"^/v1/documents/([0-9a-zA-Z]+)/(answers|reingest)$")
_DROP = {"host", "origin", "content-length"}  # checked here; the reader's own app is on loopback
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def document_of(path: str, body: bytes) -> str | None:
    """The document a request is about, for routing: the path's, or a chat completion's
    ``document_id`` / ``model: "doc:<id>"``; None when it is about none (or the body is not JSON)."""
    if match := _BY_DOCUMENT.match(path):
        return match.group(1)
    if path != "/v1/chat/completions":
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    doc_id = data.get("document_id") or ""
    model = data.get("model") or ""
    if not doc_id and isinstance(model, str) and model.startswith("doc:"):
        doc_id = model[4:]
    return doc_id if isinstance(doc_id, str) and doc_id.isalnum() else None


def _unavailable(exc: BaseException) -> JSONResponse:
    log.warning("reader failed before responding: %s: %s", type(exc).__name__, exc)
    message = "the reader replica answering this request failed; retry in a few seconds"
    return JSONResponse(
        errors.body("replica_unavailable", message), status_code=503, headers={"Retry-After": RETRY_AFTER_S}
    )


def _error_frame(path: str) -> bytes:
    """The SSE frame that ends a stream whose reader died: the docqa event, or an OpenAI data chunk."""
    data = json.dumps(errors.body("replica_failed", "the reader replica failed mid-answer; ask again"))
    return (f"data: {data}\n\n" if path == "/v1/chat/completions" else f"event: error\ndata: {data}\n\n").encode()


def build_app(settings: Settings) -> FastAPI:
    app = FastAPI(title="docqa (cluster)", version="0.1.0")
    metrics = Metrics()
    handlers.install(app)

    @app.get("/metrics", include_in_schema=False)
    async def prometheus() -> Response:
        return Response(gather(settings.data_dir, own=metrics.render()), media_type=CONTENT_TYPE)

    add_page_and_guards(app, settings, metrics)
    return app


async def _relay(parts, path: str, streaming: bool) -> AsyncIterator[bytes]:
    """The reader's body chunks; if it dies midway, an SSE error event (a plain body just ends).
    Closing this (the client hung up) cancels the request on the reader."""
    try:
        async for chunk in parts:
            yield chunk
    except Exception as exc:
        log.warning("reader failed mid-response: %s: %s", type(exc).__name__, exc)
        if streaming:
            yield _error_frame(path)
    finally:
        parts.cancel()


# Serve pickles the deployment class when it is decorated: everything it uses is defined above.
app = build_app(Settings())


@serve.deployment(name="Ingress", ray_actor_options={"num_cpus": 0}, max_ongoing_requests=1000)
@serve.ingress(app)
class Ingress:
    def __init__(self, reader: DeploymentHandle) -> None:
        self.reader = reader.options(stream=True)
        # This replica's environment (the config's runtime_env), read now for the routing: the module
        # may have been imported, and the app pickled, in another process (the driver of `serve.run`).
        # The app (its middleware and /metrics) keeps the settings of the import: `serve.ingress`
        # serves a copy of it made at decoration, which nothing here reaches.
        self.settings = Settings()

    @app.api_route("/{path:path}", methods=METHODS, include_in_schema=False)
    async def proxy(self, path: str, request: Request) -> Response:
        body = await request.body()
        req = ProxiedRequest(
            method=request.method,
            path=request.url.path,
            query=request.url.query.encode(),
            headers=[(k, v) for k, v in request.headers.items() if k not in _DROP] + [("host", "127.0.0.1")],
            body=body,
        )
        doc_id = document_of(req.path, body) if self.settings.debug_cluster_routing == "document" else None
        handle = self.reader.options(multiplexed_model_id=doc_id) if doc_id else self.reader
        parts = handle.forward.remote(req)
        try:
            head = await parts.__anext__()
        except Exception as exc:  # the replica died, or none is up
            parts.cancel()
            return _unavailable(exc)
        headers = {k: v for k, v in head["headers"] if k.lower() not in ("content-length", "transfer-encoding")}
        streaming = headers.get("content-type", "").startswith("text/event-stream")
        return StreamingResponse(_relay(parts, req.path, streaming), status_code=head["status"], headers=headers)
