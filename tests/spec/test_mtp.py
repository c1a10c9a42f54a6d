"""MTP drafting, the combined MTP + lookup window, and hybrid rollback, on a tiny random-weight qwen35
model with one MTP layer (tests/tiny_qwen35.py). The model is f32, so speculative output must equal
plain greedy output exactly (notes §13-14)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from runtime.llama import Model, RuntimeError_
from spec.cost import calibrate
from spec.lookup import LookupDrafter, NgramIndex
from spec.loop import AnswerParams, AnswerRun, AnswerStats, generate
from spec.mtp import MtpDrafter
from spec.sampling import SamplingParams
from tests.helpers import open_ctx

PROMPTS = [
    "the cat sat on the mat and the dog ran in the sun. the cat sat on the mat",
    "an apple and an orange; an apple and a pear; a pear and an orange",
    "she sells sea shells on the sea shore",
]
N = 48
SOURCES = {"mtp": ("mtp",), "lookup": ("lookup",), "combined": ("mtp", "lookup")}


class Tiny:
    """Target + MTP context on the tiny model, 1 thread (fast and stable under CPU contention)."""

    def __init__(self, model: Model, n_rs_seq: int = 16) -> None:
        cfg = dict(n_ctx=2048, n_batch=64, n_ubatch=64, n_threads=1, n_threads_batch=1)
        self.model = model
        self.t = open_ctx(model, n_rs_seq=n_rs_seq, **cfg)
        self.d = open_ctx(model, mtp=True, **cfg)
        self.mtp = MtpDrafter(self.t, self.d)
        zeros = np.zeros((1, self.d.n_embd), dtype=np.float32)

        def mtp_step() -> None:
            self.d.decode([0], 0, outputs="all", embd=zeros)
            self.d.logits()[0].argmax()
            self.d.seq_rm(0, 0)

        self.costs = calibrate(self.t, 0, mtp_step, repeats=3)  # as the engine does at start-up

    def start(self, prompt: np.ndarray) -> None:
        self.t.clear()
        self.d.clear()
        self.mtp.reset()
        self.t.prefill(prompt, 0, on_chunk=self.mtp.process)

    def plain(self, prompt: np.ndarray, n: int = N) -> list[int]:
        self.start(prompt)
        pos, out = len(prompt), []
        token = int(self.t.logits()[-1].argmax())
        for _ in range(n):
            out.append(token)
            self.t.decode([token], pos, outputs="all")
            pos += 1
            token = int(self.t.logits()[0].argmax())
        return out

    def speculative(
        self,
        prompt: np.ndarray,
        window: int | None,
        sources=("mtp", "lookup"),
        n: int = N,
        temperature: float = 0.0,
        seed: int | None = None,
        max_window: int = 16,
        recover=None,
    ):
        self.start(prompt)
        lookup = LookupDrafter(NgramIndex(prompt, 2, 4), self.model.piece, self.model.unspaced)
        stats = AnswerStats()
        run = AnswerRun(
            self.t,
            self.model,
            lookup,
            len(prompt),
            stats,
            time.perf_counter(),
            mtp=self.mtp,
            max_window=max_window,
            recover=recover,
        )
        params = AnswerParams(
            max_tokens=n,
            sampling=SamplingParams(temperature=temperature, seed=seed),
            window=window,
            sources=sources,
            n_mtp=min(3, window or 2),
        )
        out = [t for event in generate(run, params) for t in event.token_ids]
        return out, stats

    def close(self) -> None:
        self.d.close()
        self.t.close()


@pytest.fixture(scope="module")
def tiny_model(tiny_qwen35_path):
    model = Model(tiny_qwen35_path, load_mtp=True)
    assert model.n_layer_nextn == 1 and model.mtp_loaded and model.is_recurrent
    yield model
    model.close()


@pytest.fixture(scope="module")
def tiny(tiny_model):
    runner = Tiny(tiny_model)
    yield runner
    runner.close()


@pytest.fixture(scope="module")
def prompts(tiny_model):
    return [tiny_model.tokenize(p, parse_special=False) for p in PROMPTS]


@pytest.fixture(scope="module")
def plain_outputs(tiny, prompts):
    return [tiny.plain(p) for p in prompts]


@pytest.mark.parametrize("window", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("source", ["mtp", "lookup", "combined"])
def test_speculative_equals_plain_greedy(tiny, prompts, plain_outputs, window, source):
    drafted = accepted = 0
    for prompt, plain in zip(prompts, plain_outputs, strict=True):
        out, stats = tiny.speculative(prompt, window, SOURCES[source])
        assert out == plain, f"{source} window {window} diverged"
        drafted += stats.drafted_tokens
        accepted += stats.accepted_tokens
        if source == "mtp":
            assert stats.drafted_by_source["lookup"] == 0
        if source == "lookup":
            assert stats.drafted_by_source["mtp"] == 0
    assert drafted > 0  # speculation really ran
    print(f"{source} window {window}: accepted {accepted}/{drafted}")


def test_adaptive_mode_equals_plain_and_uses_both_sources(tiny, prompts, plain_outputs):
    used = {"mtp": 0, "lookup": 0}
    for prompt, plain in zip(prompts, plain_outputs, strict=True):
        out, stats = tiny.speculative(prompt, None)
        assert out == plain
        for k in used:
            used[k] += stats.drafted_by_source[k]
    assert used["mtp"] > 0 and used["lookup"] > 0


def test_mtp_drafts_are_sometimes_accepted_and_sometimes_rejected(tiny, prompts):
    _, stats = tiny.speculative(prompts[0], 3, ("mtp",))
    assert 0 < stats.accepted_by_source["mtp"] < stats.drafted_by_source["mtp"]


@pytest.mark.parametrize("n_accepted", [0, 2, 5])
def test_rollback_leaves_the_state_of_a_fresh_decode(tiny_model, prompts, n_accepted):
    """Verify 5 drafts, accept n, roll back both contexts; compare with decoding only the kept tokens."""
    from spec.sampling import Sampler
    from spec.verify import verify

    prompt, k = prompts[0], 5
    ref = Tiny(tiny_model)
    good = ref.plain(prompt, k + 2)
    last, target = good[0], good[1 : k + 1]
    draft = list(target)
    if n_accepted < k:
        draft[n_accepted] = (target[n_accepted] + 1) % tiny_model.n_vocab
    run = Tiny(tiny_model)
    run.start(prompt)
    pos = len(prompt)
    result = verify(run.t, Sampler(SamplingParams()), last, draft, pos)
    run.mtp.process([last, *draft], pos)
    assert result.n_accepted == n_accepted
    n_keep = pos + 1 + n_accepted
    if n_accepted < k:
        assert run.t.seq_rm(0, n_keep)
    run.mtp.accept(n_keep)
    assert run.t.pos_max(0) == run.d.pos_max(0) == n_keep - 1

    ref.start(prompt)
    kept = [last, *draft[:n_accepted]]
    ref.t.decode(kept, pos, outputs="all")
    ref.mtp.process(kept, pos)
    nxt = result.tokens[-1]
    for r in (run, ref):
        r.t.decode([nxt], n_keep, outputs="all")
    # Same tokens, same state: equal up to f32 row-count rounding (~1e-5 on logits of +-30).
    after = run.t.logits()[0].copy()
    np.testing.assert_allclose(after, ref.t.logits()[0], atol=1e-3, rtol=0)
    # Negative control: had the rejected draft stayed in the recurrent state, the logits would differ.
    bad = Tiny(tiny_model)
    bad.start(prompt)
    bad.t.decode([*kept, (nxt + 7) % tiny_model.n_vocab], pos, outputs="none")
    bad.t.decode([nxt], n_keep + 1, outputs="all")
    assert np.abs(bad.t.logits()[0] - after).max() > 1e-2
    bad.close()
    run.mtp.process([nxt], n_keep)
    ref.mtp.process([nxt], n_keep)
    assert run.mtp.draft(nxt, n_keep + 1, 3) == ref.mtp.draft(nxt, n_keep + 1, 3)
    run.close()
    ref.close()


def test_rollback_past_n_rs_seq_is_refused_and_recovered(tiny_model, prompts, plain_outputs):
    """A window wider than n_rs_seq cannot be rolled back in place: seq_rm says False, and the loop
    rebuilds the sequence (snapshot + replay) and still emits plain greedy output."""
    small = Tiny(tiny_model, n_rs_seq=2)
    prompt = prompts[0]
    small.start(prompt)
    saved = (small.t.state_get(0), small.d.state_get(0), small.mtp.pending_h.copy())
    recoveries = []

    def recover(answer_tokens: list[int]) -> int:
        recoveries.append(len(answer_tokens))
        small.t.state_set(saved[0], 0)
        small.d.state_set(saved[1], 0)
        small.mtp.reset(saved[2])
        replay = np.asarray(answer_tokens, dtype=np.int32)
        small.t.prefill(replay, len(prompt), on_chunk=small.mtp.process)
        return len(prompt) + len(replay)

    out, _ = small.speculative(prompt, 8, ("mtp", "lookup"), max_window=8, recover=recover)
    assert out == plain_outputs[0]
    assert recoveries, "a rollback deeper than n_rs_seq should have needed recovery"
    small.close()


def test_snapshot_round_trip_drafts_exactly_as_fresh(tiny, prompts, tmp_path):
    """Document prefix -> snapshot (target + MTP KV + last hidden state); a question answered from the
    restored snapshot gives the same tokens and the same drafts per source as from the fresh prefill."""
    from ingest import snapshot

    prefix, suffix = prompts[1], tiny.model.tokenize(" and an apple", parse_special=False)

    def answer() -> tuple[list[int], AnswerStats]:
        tiny.t.prefill(suffix, len(prefix), on_chunk=tiny.mtp.process)
        lookup = LookupDrafter(NgramIndex(prefix, 2, 4), tiny.model.piece, tiny.model.unspaced)
        lookup.extend(suffix.tolist())
        stats = AnswerStats()
        run = AnswerRun(tiny.t, tiny.model, lookup, len(prefix) + len(suffix), stats, time.perf_counter(), mtp=tiny.mtp)
        params = AnswerParams(max_tokens=N, sampling=SamplingParams(), window=16)
        return [t for e in generate(run, params) for t in e.token_ids], stats

    tiny.start(prefix)
    snapshot.save(tiny.t, 0, prefix, tmp_path, tiny.d, tiny.mtp.pending_h)
    fresh_out, fresh = answer()
    tiny.t.clear()
    tiny.d.clear()
    tiny.mtp.reset()
    tiny.mtp.reset(snapshot.load(tiny.t, 0, prefix, tmp_path, tiny.d))
    restored_out, restored = answer()
    assert restored_out == fresh_out
    assert restored.drafted_by_source == fresh.drafted_by_source
    assert restored.accepted_by_source == fresh.accepted_by_source
    assert fresh.drafted_by_source["mtp"] > 0


def test_sampling_with_speculation_matches_plain_sampling(tiny, prompts):
    """Temperature 0.9: the distribution of the 2nd..4th answer tokens under speculation (window 4,
    MTP + lookup) matches plain sampling (window 0), chi-square over 150 seeds each."""
    from scipy.stats import chi2_contingency

    prompt = prompts[0]
    spec_tokens, plain_tokens = [], []
    for seed in range(150):
        out, _ = tiny.speculative(prompt, 4, n=4, temperature=0.9, seed=seed)
        spec_tokens += out[1:]
        out, _ = tiny.speculative(prompt, 0, n=4, temperature=0.9, seed=10_000 + seed)
        plain_tokens += out[1:]
    vocab = sorted(set(spec_tokens) | set(plain_tokens))
    table = np.array([[spec_tokens.count(v) for v in vocab], [plain_tokens.count(v) for v in vocab]])
    table = table[:, table.sum(axis=0) >= 5]  # chi-square needs populated cells
    p = chi2_contingency(table).pvalue
    print(f"chi-square p = {p:.3f} over {table.shape[1]} tokens")
    assert p > 0.001
    # Each emitted token uses one uniform draw in both modes: the same seed gives the same tokens.
    same_seed = [tiny.speculative(prompt, w, n=12, temperature=0.9, seed=7)[0] for w in (0, 4, 16)]
    assert same_seed[0] == same_seed[1] == same_seed[2]


def test_mtp_context_without_mtp_layers_is_refused_not_aborted(tiny_qwen35_path, tmp_path):
    from tests.tiny_qwen35 import write_tiny_qwen35

    skipped = Model(tiny_qwen35_path, load_mtp=False)  # layers present but not loaded
    with pytest.raises(RuntimeError_, match="no MTP layers"):
        open_ctx(skipped, mtp=True)
    skipped.close()
    plain = Model(write_tiny_qwen35(tmp_path / "no-mtp.gguf", with_mtp=False), load_mtp=True)
    assert plain.n_layer_nextn == 0 and not plain.mtp_loaded
    with pytest.raises(RuntimeError_, match="no MTP layers"):
        open_ctx(plain, mtp=True)
    plain.close()


def test_batched_mtp_drafts_and_catch_up_equal_per_sequence(tiny_model, prompts):
    """draft_many / process_many (one MTP decode per depth, and one per catch-up, for all sequences)
    give the same drafts and the same MTP state as each sequence's own calls."""
    from spec.mtp import draft_many, process_many

    cfg = dict(n_ctx=2048, n_batch=64, n_ubatch=64, n_threads=1, n_threads_batch=1, n_seq_max=4, kv_unified=True)
    t = open_ctx(tiny_model, n_rs_seq=4, **cfg)
    d = open_ctx(tiny_model, mtp=True, **cfg)
    try:
        drafters = [MtpDrafter(t, d, seq) for seq in (1, 2, 3)]
        lasts, positions = [], []
        for drafter, prompt in zip(drafters, prompts, strict=True):
            t.prefill(prompt, 0, seq_id=drafter.seq_id, on_chunk=drafter.process)
            lasts.append(int(t.logits()[-1].argmax()))
            positions.append(len(prompt))
        alone = [dr.draft(last, pos, 3) for dr, last, pos in zip(drafters, lasts, positions, strict=True)]
        draft_many(drafters, lasts, positions, 3)
        assert [dr._prefetched[2] for dr in drafters] == alone
        together = [dr.draft(last, pos, 2) for dr, last, pos in zip(drafters, lasts, positions, strict=True)]
        assert together == [a[:2] for a in alone]  # served from the batch
        assert all(dr._prefetched is None for dr in drafters)
        for dr, pos in zip(drafters, positions, strict=True):
            assert d.pos_max(dr.seq_id) == pos - 1  # the guesses were removed again

        # Catch-up after a target verify of [last, *draft] for every sequence, batched vs one by one.
        rows = [[last, *a] for last, a in zip(lasts, alone, strict=True)]
        hidden = []
        for dr, r, pos in zip(drafters, rows, positions, strict=True):
            t.decode(r, pos, seq_id=dr.seq_id, outputs="all")
            hidden.append(t.hidden().copy())
        before = [dr.pending_h.copy() for dr in drafters]
        process_many(drafters, rows, positions, hidden)
        batched = [dr.draft(r[-1], pos + len(r), 3) for dr, r, pos in zip(drafters, rows, positions, strict=True)]
        for dr, r, pos, h0, h in zip(drafters, rows, positions, before, hidden, strict=True):
            d.seq_rm(dr.seq_id, pos)
            dr.pending_h = h0
            dr.process(r, pos, h)
        single = [dr.draft(r[-1], pos + len(r), 3) for dr, r, pos in zip(drafters, rows, positions, strict=True)]
        assert batched == single
    finally:
        d.close()
        t.close()
