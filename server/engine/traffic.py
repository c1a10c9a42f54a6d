"""The traffic log: one JSON line per finished answer in ``DATA_DIR/traffic.jsonl``, the shape of the
real load that ``docqa tune`` replays (server/tools/replay.py). Off with ``DOCQA_TRAFFIC_LOG=false``.

It records lengths and timings, never text: the document id and its prefix length, the question's
tokens (its suffix: the question, earlier turns and the prompt scaffolding), the answer's tokens and
``max_tokens``, how many answers were running when it was admitted, the draft window and sources,
drafted/accepted tokens per source, TTFT and decode time. The file rotates at
``DOCQA_TRAFFIC_LOG_BYTES`` (logging.handlers.RotatingFileHandler; ``.1`` and ``.2`` are kept).
Records are written on the engine thread; a failed write is logged once and never fails an answer.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from server.config.settings import Settings
from spec.limits import MAX_WINDOW
from spec.sources import NAMES

if TYPE_CHECKING:
    from server.engine.sequence import Sequence

log = logging.getLogger("docqa.traffic")
LOG_FILE = "traffic.jsonl"
BACKUPS = 2  # rotated files kept: traffic.jsonl.1 (newer), traffic.jsonl.2
VERSION = 1  # of the record layout; readers skip lines of other versions
#: Bounds of a replayed record: a context of 10M tokens, a question of at most 256k, an answer of at
#: most the API's max_tokens (server/api/schemas.py MAX_ANSWER_TOKENS).
MAX_TOKENS, MAX_QUESTION_TOKENS, MAX_ANSWER_TOKENS = 10_000_000, 262_144, 32_768


class TrafficLog:
    """Appends a record per answer to ``data_dir/traffic.jsonl`` (engine thread only)."""

    def __init__(self, settings: Settings) -> None:
        self.path = Path(settings.data_dir) / LOG_FILE
        self.default_window = settings.default_draft_tokens
        self._handler = RotatingFileHandler(
            self.path, maxBytes=settings.traffic_log_bytes, backupCount=BACKUPS, encoding="utf-8", delay=True
        )
        self._handler.setFormatter(logging.Formatter("%(message)s"))
        self._failed = False

    def record(self, seq: Sequence, stats: dict) -> None:
        """Log the answer ``seq`` just finished with ``stats`` (spec.loop.AnswerStats as a dict)."""
        job, params = seq.job, seq.job.params
        elapsed_s = time.perf_counter() - job.t_start
        line = {
            "v": VERSION,
            "t": round(time.time() - elapsed_s, 3),  # arrival, unix seconds
            "doc": job.doc_id,
            "doc_tokens": seq.n_prefix,
            "question_tokens": len(seq.suffix),
            "turns": len(job.history),
            "answer_tokens": stats["completion_tokens"],
            "max_tokens": params.max_tokens,
            "finish": stats["finish_reason"],
            "concurrency": seq.n_running,
            # The window as decoded (null: adaptive). A request that named none got the server's
            # DOCQA_DEFAULT_DRAFT_TOKENS; one that named the same number is counted as the server's.
            "window": params.window,
            "window_by": "server" if params.window == self.default_window else "request",
            "sources": list(params.sources),
            "temperature": params.sampling.temperature,
            "top_k": params.sampling.top_k,
            "top_p": params.sampling.top_p,
            "drafted": stats["drafted_by_source"],
            "accepted": stats["accepted_by_source"],
            "verify_steps": stats["verify_steps"],
            "ttft_ms": round(stats["ttft_ms"], 1),
            "decode_ms": round(max(elapsed_s * 1000 - stats["ttft_ms"], 0.0), 1),
        }
        try:
            self._handler.handle(logging.makeLogRecord({"msg": json.dumps(line), "levelno": logging.INFO}))
        except Exception:
            if not self._failed:
                log.exception("cannot write the traffic log %s; answers go on without it", self.path)
            self._failed = True

    def close(self) -> None:
        self._handler.close()


@dataclass(frozen=True, slots=True)
class TrafficRecord:
    """One answer of the log, as replay needs it."""

    t: float  # arrival, unix seconds
    doc: str
    doc_tokens: int
    question_tokens: int
    answer_tokens: int
    concurrency: int  # answers running when it was admitted
    window: int | None  # None: adaptive
    window_by: str  # "request" | "server"
    sources: tuple[str, ...]
    temperature: float
    top_k: int
    top_p: float
    ttft_ms: float
    decode_ms: float


def log_files(path: Path) -> list[Path]:
    """``path`` and its rotated predecessors that exist, oldest first."""
    older = [path.with_name(f"{path.name}.{i}") for i in range(BACKUPS, 0, -1)]
    return [p for p in (*older, path) if p.is_file()]


class TrafficLine(BaseModel):
    """What a line of the log must be to be replayed: every count and time bounded (issue 27: one line
    with ``question_tokens: 1e9`` grew ``docqa tune`` to 22.8 GB, a document id ``../../../etc`` and a
    string ``t`` gave tracebacks). A line that is not one is skipped and counted."""

    model_config = ConfigDict(extra="ignore")

    v: Literal[1]
    t: float = Field(ge=0, allow_inf_nan=False)
    doc: str = Field(pattern=r"^[0-9a-zA-Z]{1,64}$")
    doc_tokens: int = Field(ge=0, le=MAX_TOKENS)
    question_tokens: int = Field(ge=1, le=MAX_QUESTION_TOKENS)
    answer_tokens: int = Field(ge=0, le=MAX_ANSWER_TOKENS)
    concurrency: int = Field(ge=0, le=1024)
    window: int | None = Field(ge=0, le=MAX_WINDOW)
    window_by: Literal["request", "server"]
    sources: list[Literal[NAMES]] = Field(min_length=1, max_length=len(NAMES))
    temperature: float = Field(ge=0, le=5, allow_inf_nan=False)
    top_k: int = Field(ge=0, le=1_000_000)
    top_p: float = Field(gt=0, le=1, allow_inf_nan=False)
    ttft_ms: float = Field(ge=0, le=1e9, allow_inf_nan=False)
    decode_ms: float = Field(ge=0, le=1e10, allow_inf_nan=False)


def read_log(path: Path) -> list[TrafficRecord]:
    """Every record of ``path`` (and its rotated files), by arrival time (:func:`read_log_counted`)."""
    return read_log_counted(path)[0]


def read_log_counted(path: Path) -> tuple[list[TrafficRecord], int]:
    """Every record of ``path`` (and its rotated files), by arrival time, and how many lines were
    skipped: lines that are not records of this version (a line cut by a crash, a future layout), or
    whose values are out of bounds (:class:`TrafficLine`)."""
    records: list[TrafficRecord] = []
    skipped = 0
    for file in log_files(path):
        for line in file.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                raw = TrafficLine.model_validate_json(line)
            except ValidationError:
                skipped += 1
                continue
            fields = raw.model_dump()
            records.append(
                TrafficRecord(
                    **{k: fields[k] for k in TrafficRecord.__slots__ if k != "sources"}, sources=tuple(raw.sources)
                )
            )
    if skipped:
        log.warning("%s: skipped %d lines that are not valid traffic records", path, skipped)
    return sorted(records, key=lambda r: r.t), skipped
