"""Prometheus metrics (prometheus-client), one registry per app so several apps can live in one
process (tests). Exposed at GET /metrics in the text exposition format."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
TTFT_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)  # seconds
TPS_BUCKETS = (5, 10, 20, 40, 60, 80, 120, 160, 240, 400)  # tokens per second
BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 32, 64)  # questions per step


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("docqa_http_requests", "HTTP requests", ["route", "status"], registry=r)
        self.latency = Histogram(
            "docqa_http_request_seconds", "HTTP request latency (until the response starts)", ["route"], registry=r
        )
        self.ttft = self._histogram("docqa_ttft_seconds", "Time to first token of an answer", TTFT_BUCKETS)
        self.decode_tps = self._histogram("docqa_decode_tokens_per_second", "Decode rate of each answer", TPS_BUCKETS)
        self.completion_tokens = Counter("docqa_completion_tokens", "Tokens generated", registry=r)
        self.drafted = Counter("docqa_draft_tokens", "Draft tokens verified", ["source"], registry=r)
        self.accepted = Counter("docqa_accepted_draft_tokens", "Draft tokens accepted", ["source"], registry=r)
        self.queue_depth = Gauge("docqa_engine_queue_depth", "Jobs waiting for the engine", registry=r)
        self.active = Gauge("docqa_active_answers", "Questions being answered in the current batch", registry=r)
        self.batch = self._histogram(
            "docqa_batch_sequences", "Questions decoded together in one verify step", BATCH_BUCKETS
        )
        self.model_batched = Counter(
            "docqa_model_batched_decodes",
            "Decodes of a model drafter's context (the MTP head, a draft model) that served several questions at once",
            registry=r,
        )
        self.rebuilds = Counter(
            "docqa_rollback_rebuilds", "Sequences rebuilt from the document prefix after a failed rollback", registry=r
        )
        self._engine = None
        self._store = None
        r.register(self)  # collect(): live values read at scrape time

    def _histogram(self, name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
        return Histogram(name, doc, buckets=buckets, registry=self.registry)

    def bind(self, engine, store) -> None:
        self._engine, self._store = engine, store

    def observe_answer(self, stats: dict) -> None:
        self.ttft.observe(stats["ttft_ms"] / 1000)
        if stats["completion_tokens"] > 1:
            self.decode_tps.observe(stats["decode_tokens_per_s"])
        self.completion_tokens.inc(stats["completion_tokens"])
        for source, n in stats["drafted_by_source"].items():
            self.drafted.labels(source).inc(n)
            self.accepted.labels(source).inc(stats["accepted_by_source"].get(source, 0))

    def observe_step(self, n_seqs: int, model_batched: int) -> None:
        self.batch.observe(n_seqs)
        if model_batched:
            self.model_batched.inc(model_batched)

    def observe_rebuild(self) -> None:
        self.rebuilds.inc()

    def collect(self):
        """Values read at scrape time: ingest progress per document and snapshot bytes on disk."""
        if self._engine is not None:
            self.queue_depth.set(self._engine.queue_depth)
            self.active.set(self._engine.active_answers)
            progress = GaugeMetricFamily("docqa_ingest_progress", "Prefill progress (0..1)", labels=["document"])
            for doc_id, value in self._engine.reading_ids().items():
                progress.add_metric([doc_id], value)
            yield progress
            yield GaugeMetricFamily(
                "docqa_kv_positions",
                "KV cache positions held, summed over sequences, after the last engine step",
                value=self._engine.kv_positions,
            )
        if self._store is not None:
            yield GaugeMetricFamily(
                "docqa_snapshot_bytes", "Bytes of document snapshots on disk", value=self._store.snapshot_bytes()
            )

    def describe(self):
        return []

    def render(self) -> bytes:
        return generate_latest(self.registry)


class RequestMetrics:
    """ASGI middleware: count requests by route template and status (``cancelled`` when the client
    hung up first), and time them until the response starts."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = "500"
        complete = gone = False

        async def watched_receive() -> Message:
            nonlocal gone
            message = await receive()
            gone = gone or (message["type"] == "http.disconnect" and not complete)
            return message

        async def timed_send(message: Message) -> None:
            nonlocal status, complete
            if message["type"] == "http.response.start":
                status = str(message["status"])
                route = scope.get("route")
                self.metrics.latency.labels(getattr(route, "path", "other")).observe(time.perf_counter() - t0)
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                complete = True
            await send(message)

        try:
            await self.app(scope, watched_receive, timed_send)
        finally:
            route = scope.get("route")
            # A client that hung up before the whole response was sent: counted as such, not as the
            # status its response would have had (a stream's 200 goes out before its first token; a
            # JSON answer cut short by the hang-up may still be "sent" to nobody afterwards).
            self.metrics.requests.labels(getattr(route, "path", "other"), "cancelled" if gone else status).inc()
