"""The decode calls of the running batch: one ``llama_decode`` per step over every running sequence.

Each step, every running question adds its verify rows ``[last, *draft]`` to one batch (per-row
seq ids, logits on every row), and reads its own slice of the logits. A model source's drafts for
several questions come from one decode per depth of its context (spec/sources.py
``ModelDrafter.propose_many``), and after every target decode the companions catch up on the rows it
decoded in one call of theirs (server/engine/companions.py ``decoded``: the MTP head's n + 1 MTP
calls per step instead of (n + 1) x questions). A question's sequence shares the document prefix by
``seq_cp`` (unified KV; a recurrent state is shared copy-on-write). Engine thread only.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np

from runtime.llama import DecodeError
from server.engine.contexts import Contexts
from server.engine.sequence import Sequence
from spec import sources
from spec.cost import CostModel
from spec.draft import Plan
from spec.loop import RollbackFailed, Step
from spec.sources import Drafter

log = logging.getLogger("docqa.engine")

Outcome = Step | Exception  # what a step did for one sequence


@dataclass(slots=True)
class StepReport:
    """One step's outcome per sequence, and how many decodes of a model drafter's context served
    several sequences at once."""

    outcomes: list[tuple[Sequence, Outcome]] = field(default_factory=list)
    model_batched: int = 0


class Runner:
    def __init__(
        self, contexts: Contexts, doc_seq: int, max_rows: int | None = None, costs: CostModel | None = None
    ) -> None:
        """``max_rows``: rows per verify call (default ``n_batch``); DOCQA_BATCH_INVARIANT's fallback
        (server/engine/loading.py) sets spec/limits.py ``INVARIANT_MAX_ROWS``, so a row's logits do not depend
        on how many other sequences share the step. ``costs``: told the wall time of every verify call (decode,
        the companions' catch-up and accept), which the adaptive window prices its drafts with."""
        self.contexts, self.doc_seq, self.costs = contexts, doc_seq, costs
        self.ctx, self.companions = contexts.target, contexts.companions
        self.max_rows = min(max_rows or self.ctx.n_batch, self.ctx.n_batch)
        self.invariant = self.max_rows < self.ctx.n_batch  # DOCQA_BATCH_INVARIANT's row-cap fallback is on

    # -- a sequence's life --------------------------------------------------------------------------
    def share_prefix(self, seq_id: int, key: str, n_prefix: int) -> dict[str, Drafter]:
        """Make ``seq_id`` hold exactly the document prefix ``key`` (``n_prefix`` shared cells of the
        document sequence), in every context that holds it; the companions' drafters for it, by source
        name (a rebuild's drafters are started again at the prefix)."""
        self.ctx.seq_rm(seq_id, 0)
        self.ctx.seq_cp(self.doc_seq, seq_id, 0, n_prefix)
        return self.companions.share(key, seq_id, n_prefix)

    def share_reading(self, source_seq: int, seq_id: int, n_read: int) -> dict[str, Drafter]:
        """Make ``seq_id`` hold the first ``n_read`` tokens of a reading in ``source_seq``; the
        companions' drafters for it (server/engine/contexts.py ``Contexts.share_reading``)."""
        return self.contexts.share_reading(source_seq, seq_id, n_read)

    def _decoded(self, pieces: list[tuple[int, np.ndarray, int]]) -> tuple[dict[int, Exception], int]:
        """The companions' catch-up after a target decode of ``pieces`` (seq id, tokens, first position)."""
        return self.companions.decoded(pieces) if self.companions else ({}, 0)

    def prefill_chunks(self, seqs: list[Sequence], budget: int) -> list[tuple[Sequence, np.ndarray | None]]:
        """Decode the next pieces of the questions' suffixes in one call, oldest first, ``budget``
        tokens in all (a long question takes the whole budget; short ones share it), with the
        companions' catch-up. Returns each sequence decoded with the logits row of its first answer
        token (a copy) once its whole suffix is in, else None."""
        pieces, full = [], budget
        for seq in seqs:
            if budget <= 0:
                break
            chunk = seq.suffix[seq.n_prefilled : seq.n_prefilled + budget]
            if self.invariant and pieces and len(chunk) < min(full, len(seq.suffix) - seq.n_prefilled):
                # DOCQA_BATCH_INVARIANT: cut a suffix only where it is cut when asked alone, so no piece
                # lands in the other row-count regime (spec/limits.py); it waits for the next step.
                break
            pieces.append((seq, chunk, seq.n_prefix + seq.n_prefilled))
            budget -= len(chunk)
        ends = [seq.n_prefilled + len(chunk) >= len(seq.suffix) for seq, chunk, _ in pieces]
        offsets = np.cumsum([0] + [len(c) for _, c, _ in pieces]).tolist()
        tokens = np.concatenate([c for _, c, _ in pieces]).astype(np.int32)
        pos = np.concatenate([np.arange(p, p + len(c), dtype=np.int32) for _, c, p in pieces])
        seq_ids = np.concatenate([np.full(len(c), s.seq_id, dtype=np.int32) for s, c, _ in pieces])
        outputs = np.zeros(len(tokens), dtype=np.int8)
        outputs[[offsets[i + 1] - 1 for i, end in enumerate(ends) if end]] = 1  # each finished suffix's last row
        self.ctx.decode_rows(tokens, pos, seq_ids, outputs)
        failed, _ = self._decoded([(s.seq_id, c, p) for s, c, p in pieces])
        if failed:
            raise next(iter(failed.values()))
        logits = self.ctx.logits() if any(ends) else None
        out, row = [], 0
        for (seq, chunk, _), end in zip(pieces, ends, strict=True):
            seq.n_prefilled += len(chunk)
            out.append((seq, logits[row].copy() if end else None))
            row += int(end)
        return out

    def prefill(self, seq: Sequence, tokens: np.ndarray, should_stop=None) -> bool:
        """Decode ``tokens`` after the prefix of ``seq`` (the question, or a replay), with the
        companions' catch-up; the last row's logits are then ready. False if ``should_stop()`` turned
        true."""

        def catch_up(chunk: np.ndarray, pos0: int) -> None:
            failed, _ = self._decoded([(seq.seq_id, chunk, pos0)])
            if failed:
                raise failed[seq.seq_id]

        on_chunk = catch_up if self.companions else None
        return self.ctx.prefill(tokens, seq.n_prefix, seq_id=seq.seq_id, should_stop=should_stop, on_chunk=on_chunk)

    def rebuild(self, seq: Sequence) -> None:
        """A rollback failed (a recurrent state refuses rollbacks past n_rs_seq): share the prefix
        again and decode the question and the answer so far. Raises RollbackFailed unless the
        sequence then ends exactly where the answer expects it (``n_past - 1``)."""
        if seq.read is not None:  # its prefix was the reading's, which has moved on since
            raise RollbackFailed(f"sequence {seq.seq_id} answered from a reading that has moved on cannot be rebuilt")
        log.warning("rollback failed on %s (seq %d); rebuilding it from the prefix", seq.job.doc_id, seq.seq_id)
        self.share_prefix(seq.seq_id, seq.job.key, seq.n_prefix)  # the companions catch up again
        for name in self.companions.names:
            if (drafter := seq.answer.drafters.get(name)) is not None:
                drafter.rollback(seq.n_prefix)
        replay = np.concatenate([seq.suffix, np.asarray(seq.answer.replay_ids(), dtype=np.int32)])
        self.prefill(seq, replay)
        seq.answer.count_replay(len(replay))
        expected, actual = seq.answer.n_past - 1, self.ctx.pos_max(seq.seq_id)
        if actual != expected:
            raise RollbackFailed(f"sequence {seq.seq_id} was rebuilt to position {actual}, expected {expected}")

    def release(self, seq_id: int) -> None:
        """Free a question's own cells (the shared prefix stays in the document sequence)."""
        self.contexts.release(seq_id)

    # -- the batched step ---------------------------------------------------------------------------
    def step(self, seqs: list[Sequence]) -> StepReport:
        """One verify step for every sequence in ``seqs``: plan each one's draft, make the model
        sources' drafts for every sequence that planned them together, decode all rows together (in as
        few calls as ``max_rows`` allows), MTP catch-up, accept."""
        report = StepReport()
        load = len(seqs)
        plans: list[tuple[Sequence, Plan]] = []
        for seq in seqs:
            try:
                plans.append((seq, seq.answer.plan(load)))
            except Exception as exc:
                report.outcomes.append((seq, exc))
        made = self._draft_models_together(plans, report)
        planned: list[tuple[Sequence, list[int]]] = []
        for seq, _ in plans:
            try:
                planned.append((seq, seq.answer.rows(made.get(seq.seq_id))))
            except Exception as exc:
                report.outcomes.append((seq, exc))
        group: list[tuple[Sequence, list[int]]] = []
        for seq, rows in planned:
            if group and sum(len(r) for _, r in group) + len(rows) > self.max_rows:
                self._verify(group, report)
                group = []
            group.append((seq, rows))
        if group:
            self._verify(group, report)
        return report

    def _draft_models_together(self, plans: list[tuple[Sequence, Plan]], report: StepReport) -> dict[int, list[int]]:
        """The drafts of each model source for every sequence whose plan chose it, in one call per
        depth for all of them (spec/sources.py ``ModelDrafter.propose_many``; only worth it for two or
        more, and only for the sequences that asked: none is drafted to be thrown away). {}: each
        sequence drafts on its own."""
        made: dict[int, list[int]] = {}
        for name in [n for n in sources.NAMES if sources.KINDS[n] == "model"]:
            want = [(s, p) for s, p in plans if p.model == name and p.n_model > 0]
            if len(want) < 2:
                continue
            drafters = [s.answer.drafters[name] for s, _ in want]
            depth = max(p.n_model for _, p in want)
            t0 = time.perf_counter()
            try:
                drafts = type(drafters[0]).propose_many(
                    drafters, [s.answer.last for s, _ in want], [s.answer.n_past for s, _ in want], depth
                )
            except Exception:
                log.exception("batched %s drafting failed; drafting per sequence", name)
                continue
            if self.costs is not None:
                self.costs.observe_draft(name, time.perf_counter() - t0, depth, len(want))
            report.model_batched += depth
            made.update({s.seq_id: d for (s, _), d in zip(want, drafts, strict=True)})
        return made

    def _verify(self, group: list[tuple[Sequence, list[int]]], report: StepReport) -> None:
        """Decode the rows of ``group`` in one call, let the companions catch up, accept per sequence."""
        tokens = np.concatenate([np.asarray(rows, dtype=np.int32) for _, rows in group])
        pos = np.concatenate([np.arange(s.answer.n_past, s.answer.n_past + len(r), dtype=np.int32) for s, r in group])
        seq_ids = np.concatenate([np.full(len(r), s.seq_id, dtype=np.int32) for s, r in group])
        t0 = time.perf_counter()
        try:
            self.ctx.decode_rows(tokens, pos, seq_ids, np.ones(len(tokens), dtype=np.int8))
        except DecodeError as exc:
            for seq, _ in group:  # rc 1: no free KV cells; the shared cache is full, as a full context
                report.outcomes.append((seq, Step(seq.answer.stop("length")) if exc.rc == 1 else exc))
            return
        except Exception as exc:
            report.outcomes.extend((seq, exc) for seq, _ in group)
            return
        logits = self.ctx.logits()
        offsets = np.cumsum([0] + [len(rows) for _, rows in group]).tolist()
        failed, shared = self._decoded([(s.seq_id, rows, s.answer.n_past) for s, rows in group])
        report.model_batched += shared
        for i, (seq, _) in enumerate(group):
            try:
                if seq.seq_id in failed:
                    raise failed[seq.seq_id]
                report.outcomes.append((seq, seq.answer.accept(logits[offsets[i] : offsets[i + 1]])))
            except Exception as exc:
                report.outcomes.append((seq, exc))
        if self.costs is not None:
            self.costs.observe(len(tokens), time.perf_counter() - t0)
