"""What happens to an answer once it is done: its stats are made final and reported (the metrics
observer, the traffic log), it is cited off the engine thread (server/engine/citations.py), after
which its last events go out (citations, stats, done), and it joins its document's answer history
(server/engine/history.py). Engine thread only.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Protocol

from runtime.system import busy
from server.engine.citations import Citations
from server.engine.history import AnswerHistories
from server.engine.hot import HotDocs
from server.engine.sequence import Sequence
from server.engine.traffic import TrafficLog

log = logging.getLogger("docqa.engine")


class Observer(Protocol):
    """What the engine reports as it goes (server/api/metrics.py implements it). Called on the engine
    thread; an implementation must not block it."""

    def observe_answer(self, stats: dict) -> None: ...
    def observe_step(self, n_seqs: int, model_batched: int) -> None: ...
    def observe_rebuild(self) -> None: ...


class Finisher:
    """Reports and cites finished answers. ``replica``: this server's name, in every answer's stats."""

    def __init__(
        self,
        citations: Citations,
        histories: AnswerHistories,
        docs: HotDocs,
        replica: str,
        observer: Observer | None,
        traffic: TrafficLog | None,
    ) -> None:
        self.citations, self.histories, self.docs = citations, histories, docs
        self.replica, self.observer, self.traffic = replica, observer, traffic

    def finish(self, seq: Sequence) -> None:
        """``seq``'s answer is done and its sequence released: count it, then cite it off-thread, so
        what the client asks next (/health, /metrics) already sees it."""
        seq.answer.close()
        stats = asdict(seq.answer.stats) | {"replica": self.replica, "document_state": seq.document_state}
        stats["busy"] = busy()  # a slow answer on a busy machine says so (runtime/system.py)
        if self.observer is not None:
            try:
                self.observer.observe_answer(stats)
            except Exception:
                log.exception("answer observer failed")
        if self.traffic is not None:
            self.traffic.record(seq, stats)  # one line of DATA_DIR/traffic.jsonl, for docqa tune
        self.citations.finish(seq, stats)
        if self.docs.get(seq.job.key) is seq.hot:  # not dropped meanwhile (deleted, re-ingested)
            self.histories.record(seq.job.key, seq.hot, seq.suffix, seq.answer.output_ids)
