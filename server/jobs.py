"""Jobs handed from the asyncio side to the engine thread, and the event channel back.

The engine thread never touches asyncio objects directly: it calls ``loop.call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from spec.loop import AnswerParams


@dataclass(eq=False)
class IngestJob:
    doc_id: str


@dataclass(eq=False)
class AnswerJob:
    """One question. Events: ("token", {"text"}), ("citations", {"citations": [...]}), ("stats", {...}),
    ("done", {}), ("error", {...}).

    ``history``: earlier (question, answer) turns of a conversation about the same document.
    """

    doc_id: str
    question: str
    params: AnswerParams
    loop: asyncio.AbstractEventLoop
    history: tuple[tuple[str, str], ...] = ()
    t_start: float = field(default_factory=time.perf_counter)
    cancelled: threading.Event = field(default_factory=threading.Event)
    events: asyncio.Queue[tuple[str, dict[str, Any]]] = field(default_factory=asyncio.Queue)

    def emit(self, kind: str, data: dict[str, Any]) -> None:
        """Called from the engine thread."""
        self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, data))

    def fail(self, error_type: str, message: str) -> None:
        self.emit("error", {"error": {"type": error_type, "message": message}})

    def cancel(self) -> None:
        self.cancelled.set()
