"""The engine's parts without its thread, on the tiny qwen35 model (testkit/tiny_qwen35.py: a hybrid
with an MTP head, so the MTP companion is loaded): the contexts, the document sequence and RAM cache,
the runner, admission and the ingestions over a real SQLite store, for the table tests of
test_runner.py, test_hot.py, test_admission.py, test_ingestion.py and test_companions.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ingest.budget import Budget
from ingest.extract import ExtractedText
from ingest.pipeline import prepare, sha256
from server.engine.admission import Admission
from server.engine.hot import HotDocs
from server.engine.ingestion import Ingestions
from server.engine.jobs import AnswerJob, DocStates, ingest_jobs
from server.engine.loading import load
from server.engine.repairs import Repairs
from server.engine.runner import Runner
from server.engine.scheduler import Scheduler
from server.engine.sequence import DOC_SEQ, Sequence
from spec.loop import AnswerParams
from spec.sampling import SamplingParams
from store.docstore import DocRecord
from store.stores import open_store
from store.writes import store_new
from tests.conftest import make_settings

DOCUMENT = "the cat sat on the mat and the dog ran in the sun. " * 6
N_UBATCH = 64


class Loop:
    """Stands in for the asyncio loop a job sends its events through: keeps them."""

    def call_soon_threadsafe(self, fn, *args):
        fn(*args)


class Parts:
    """What the engine makes at load (server/engine/engine.py ``_load``), driven by hand."""

    def __init__(self, data_dir: Path, model_path: Path, **settings) -> None:
        values = dict(n_threads=1, n_ctx=2048, n_batch=N_UBATCH, n_ubatch=N_UBATCH, n_seq_max=2)
        self.settings = s = make_settings(data_dir, model_path, **(values | settings))
        self.loaded = load(s, DOC_SEQ)
        self.contexts, self.model = self.loaded.contexts, self.loaded.model
        self.store = open_store(s.data_dir)
        self.states = DocStates()
        self.docs = HotDocs(self.contexts, self.store, self.model, DOC_SEQ, ram_bytes=s.snapshot_ram_bytes)
        self.runner = Runner(self.contexts, DOC_SEQ, self.loaded.max_rows, self.loaded.costs)
        self.admission = Admission(self.states, self.docs, self.runner, self.loaded)
        copies = self.contexts.reader is not None
        n_ctx = self.loaded.ctx.n_ctx
        self.scheduler = Scheduler(s.n_seq_max, n_ctx, s.answer_reserve, 16, True, copies_reading=copies)
        self.resubmitted: list[tuple[str, int]] = []
        self.ingest = Ingestions(
            self.store,
            self.docs,
            self.contexts,
            {},
            self.states,
            self.scheduler.ingest_seq,
            self._resubmit,
            repairs=Repairs(self.store, None, self.model, self.loaded.layout),
        )

    def _resubmit(self, doc_id: str, n_tokens: int) -> None:
        self.resubmitted.append((doc_id, n_tokens))

    def ingest_document(self, text: str = DOCUMENT, name: str = "doc.txt") -> DocRecord:
        """Store ``text`` as an upload does and prefill it to the end (idle: it moves into the
        document sequence, so the first question needs no restore)."""
        extracted = ExtractedText(text, [0], "text", "utf-8")
        budget = Budget(self.settings.document_budget, self.loaded.ctx.n_ctx, self.model.n_ctx_train)
        prepared = prepare(extracted, self.loaded.layout, self.model, budget)
        doc, _ = store_new(self.store, text.encode(), sha256(text.encode()), name, prepared)
        self.states.mark(doc.id, DocStates.INGESTING)
        for job in ingest_jobs(doc.id, prepared.n_tokens, self.store.read_segments(doc.id)):
            work = self.ingest.start(job, idle=True)
            while not self.ingest.step(work, N_UBATCH, idle=True):
                pass
        return self.store.get(doc.id)

    def job(self, doc: DocRecord, question: str = "what did the cat do", **params) -> AnswerJob:
        suffix = np.asarray(self.loaded.layout.question_suffix(self.model, question), np.int32)
        answer = AnswerParams(**({"max_tokens": 16, "sampling": SamplingParams(), "window": 4} | params))
        return AnswerJob(doc.id, question, answer, Loop(), suffix, doc.tokens)

    def admit(self, job: AnswerJob) -> Sequence:
        """Admit ``job`` into the next free sequence, as the scheduler would."""
        seq = self.admission.admit(job, self.scheduler.free_seq_id(), self.scheduler.cells_needed(job), 0)
        self.scheduler.start(seq)
        return seq

    def close(self) -> None:
        self.ingest.close()
        self.store.close()
        self.loaded.close()
