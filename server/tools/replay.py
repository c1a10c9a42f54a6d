"""A recorded traffic log (server/engine/traffic.py) as a workload, and its replay against a server.

The workload keeps what the log recorded: each answer's document (uploaded again from the data
directory's store), question length in tokens, answer length (``max_tokens`` = the recorded answer
tokens, no stop strings), window when the request named one, draft sources, sampling settings, and
arrival time. Question text is never logged, so each question is synthetic: a run of the document's
own words, cut with the model's tokenizer until its suffix (the question and the prompt scaffolding)
has the recorded number of tokens. Concurrency follows from the arrival times: the replay sends each
question at its recorded offset (``speed`` times faster, idle gaps longer than ``max_gap_s`` cut to
it) whether or not the earlier answers are done, as the recorded clients did.
"""

from __future__ import annotations

import logging
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np

from ingest.prompt import PromptLayout
from server.api.schemas import MAX_QUESTION_CHARS
from server.engine.traffic import TrafficRecord
from server.tools.candidate import CandidateServer
from store.docstore import READY, DocStore

log = logging.getLogger("docqa.tune")
MAX_WORKERS = 256  # questions in flight at once, at most (the rest wait in the replay, not the server)


@dataclass(frozen=True, slots=True)
class Arrival:
    """One question of the replay."""

    offset_s: float  # from the start of the replay
    doc: str  # the recorded document id
    body: dict[str, Any]  # POST /v1/documents/{id}/answers
    concurrency: int  # as recorded


@dataclass(slots=True)
class Workload:
    arrivals: list[Arrival]
    documents: dict[str, tuple[str, bytes]]  # recorded id -> (file name, uploaded bytes)
    question_token_error: int = 0  # sum over questions of |synthetic - recorded| suffix tokens
    dropped: int = 0  # records whose document is no longer in the store (or not ready)


#: Most answers one replay sends (the latest ones): a tuning run stays minutes long, whatever the log holds.
MAX_REPLAYED = 2000


def synthesize(tok, layout: PromptLayout, source_ids: np.ndarray, n_tokens: int, start: int) -> str:
    """A question whose suffix (``layout.question_suffix``) is ``n_tokens`` long, or as close as
    detokenizing allows: the document's tokens from ``start`` (``source_ids``: int32 [n], the
    document's text tokenized), trimmed or extended by the difference, at most six tries."""
    # A question is at most MAX_QUESTION_CHARS characters, so never more tokens than that are cut.
    n = min(MAX_QUESTION_CHARS, max(1, n_tokens - len(layout.question_suffix(tok, "a")) + 1))
    best, best_err = "", None
    for _ in range(6):
        ids = np.resize(source_ids, start + n)[start:]  # wraps around a short document
        question = tok.detokenize(ids.tolist()).strip()[:MAX_QUESTION_CHARS] or "a"
        got = len(layout.question_suffix(tok, question))
        if best_err is None or abs(got - n_tokens) < best_err:
            best, best_err = question, abs(got - n_tokens)
        if got == n_tokens or n == 1 and got > n_tokens:
            break
        n = max(1, n + n_tokens - got)
    return best


def build_workload(
    records: list[TrafficRecord], store: DocStore, tok, layout: PromptLayout, speed: float, max_gap_s: float
) -> Workload:
    """The replay of ``records`` (by arrival time; the last :data:`MAX_REPLAYED` of them); ``tok``: the
    model's tokenizer (runtime.llama.Model)."""
    records = records[-MAX_REPLAYED:]
    documents: dict[str, tuple[str, bytes]] = {}
    source: dict[str, np.ndarray] = {}
    kept = []
    for rec in records:
        if rec.doc not in documents:
            doc, upload = store.get(rec.doc), store.read_upload(rec.doc)
            if doc is None or upload is None or doc.status != READY:
                continue
            documents[rec.doc] = (doc.name, upload)
            source[rec.doc] = tok.tokenize(store.read_text(rec.doc).text, parse_special=False)
        kept.append(rec)
    workload = Workload([], documents, dropped=len(records) - len(kept))
    offset, prev = 0.0, kept[0].t if kept else 0.0
    for i, rec in enumerate(kept):
        offset += min(rec.t - prev, max_gap_s) / speed
        prev = rec.t
        ids = source[rec.doc]
        question = synthesize(tok, layout, ids, rec.question_tokens, (i * 7919) % max(len(ids), 1))
        workload.question_token_error += abs(len(layout.question_suffix(tok, question)) - rec.question_tokens)
        body = {
            "question": question,
            "max_tokens": max(rec.answer_tokens, 1),
            "stop": [],  # the recorded length, not wherever the synthetic question makes the model stop
            "temperature": rec.temperature,
            "top_k": rec.top_k,
            "top_p": rec.top_p,
            "seed": i,
            "draft_source": "all" if len(rec.sources) > 1 else rec.sources[0],
        }
        if rec.window_by == "request" and rec.window is not None:
            body["draft_tokens"] = rec.window  # the client chose it; the server's policy is what is tuned
        workload.arrivals.append(Arrival(offset, rec.doc, body, rec.concurrency))
    return workload


@dataclass(slots=True)
class ReplayResult:
    """One candidate's replay: per-answer server stats, and the wall time from the first question
    sent to the last answer received."""

    stats: list[dict] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    concurrency: list[int] = field(default_factory=list)  # at admission, from the candidate's traffic log

    @property
    def tokens_per_s(self) -> float:
        """Answer tokens of all questions over the replay's wall time (tok/s)."""
        return sum(s["completion_tokens"] for s in self.stats) / self.wall_s if self.wall_s else 0.0

    def ttft_ms(self, q: float) -> float:
        """TTFT quantile ``q`` (0.5, 0.95) in ms: server-measured, queueing included."""
        values = sorted(s["ttft_ms"] for s in self.stats)
        if len(values) < 2:
            return values[0] if values else float("nan")
        return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]

    @property
    def accepted_per_drafted(self) -> float:
        drafted = sum(s["drafted_tokens"] for s in self.stats)
        return sum(s["accepted_tokens"] for s in self.stats) / drafted if drafted else 0.0


def replay(server: CandidateServer, workload: Workload, ready_timeout_s: float = 1800) -> ReplayResult:
    """Upload the workload's documents to ``server``, ask one warm-up question, then send every
    question at its offset and wait for all answers."""
    result = ReplayResult()
    with httpx.Client(
        base_url=server.url, timeout=httpx.Timeout(30.0, read=None), limits=httpx.Limits(max_connections=MAX_WORKERS)
    ) as http:
        ids = {doc: _ingest(http, name, data, ready_timeout_s) for doc, (name, data) in workload.documents.items()}
        if workload.arrivals:  # first-call costs (graph allocation, the document state) stay out of the numbers
            first = workload.arrivals[0]
            _ask(http, ids[first.doc], {**first.body, "max_tokens": 1})
        t0 = time.monotonic()
        with ThreadPoolExecutor(max_workers=MAX_WORKERS) as pool:
            futures = []
            for a in workload.arrivals:
                time.sleep(max(0.0, t0 + a.offset_s - time.monotonic()))
                futures.append(pool.submit(_ask, http, ids[a.doc], a.body))
            outcomes = [f.result() for f in futures]
        result.wall_s = max((end for _, end in outcomes), default=t0) - t0
    for outcome, _ in outcomes:
        (result.stats if isinstance(outcome, dict) else result.errors).append(outcome)
    result.concurrency = [r.concurrency for r in server.traffic()[1:]]  # the first: the warm-up
    return result


def _ingest(http: httpx.Client, name: str, data: bytes, timeout_s: float) -> str:
    """Upload a document and wait until it is ready; its id on this server."""
    r = http.post("/v1/documents", files={"file": (name, data)})
    if r.status_code not in (200, 202):
        raise RuntimeError(f"uploading {name} failed: {r.status_code} {r.text[:300]}")
    doc_id = r.json()["id"]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        doc = http.get(f"/v1/documents/{doc_id}").json()
        if doc["status"] == "ready":
            return doc_id
        if doc["status"] == "failed":
            raise RuntimeError(f"{name} failed to ingest: {doc['error']}")
        time.sleep(0.2)
    raise RuntimeError(f"{name} was not ingested within {timeout_s:.0f} s")


def _ask(http: httpx.Client, doc_id: str, body: dict) -> tuple[dict | str, float]:
    """The answer's stats, or the error as text; and when it ended (time.monotonic)."""
    try:
        r = http.post(f"/v1/documents/{doc_id}/answers", json=body)
        out: dict | str = r.json()["stats"] if r.status_code == 200 else f"{r.status_code}: {r.text[:200]}"
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        out = f"{type(exc).__name__}: {exc}"
    return out, time.monotonic()
