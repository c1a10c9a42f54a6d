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
from typing import TYPE_CHECKING

from server.config.settings import Settings

if TYPE_CHECKING:
    from server.engine.sequence import Sequence

log = logging.getLogger("docqa.traffic")
LOG_FILE = "traffic.jsonl"
BACKUPS = 2  # rotated files kept: traffic.jsonl.1 (newer), traffic.jsonl.2
VERSION = 1  # of the record layout; readers skip lines of other versions


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
            "n_mtp": params.n_mtp,
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


def read_log(path: Path) -> list[TrafficRecord]:
    """Every record of ``path`` (and its rotated files), by arrival time. Lines that are not records of
    this version (a line cut by a crash, a future layout) are skipped and counted in the log."""
    records: list[TrafficRecord] = []
    skipped = 0
    for file in log_files(path):
        for line in file.read_text(encoding="utf-8").splitlines():
            try:
                raw = json.loads(line)
                if raw.get("v") != VERSION:
                    raise ValueError(f"version {raw.get('v')}")
                records.append(
                    TrafficRecord(
                        **{k: raw[k] for k in TrafficRecord.__slots__ if k != "sources"},
                        sources=tuple(raw["sources"]),
                    )
                )
            except (ValueError, KeyError, TypeError, AttributeError):
                skipped += 1
    if skipped:
        log.warning("%s: skipped %d lines that are not traffic records", path, skipped)
    return sorted(records, key=lambda r: r.t)
