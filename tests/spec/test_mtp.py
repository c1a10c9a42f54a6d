"""MTP drafting, the combined MTP + lookup window, and hybrid rollback, on a tiny random-weight qwen35
model with one MTP layer (testkit/tiny_qwen35.py). The model is f32, so speculative output must equal
plain greedy output exactly (notes §13-14)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from runtime.llama import LlamaError, Model
from spec.cost import StepCosts
from spec.lookup import LookupDrafter, NgramIndex
from spec.loop import AnswerParams, AnswerRun, AnswerStats, RollbackFailed
from spec.mtp import MtpDrafter
from spec.sampling import SamplingParams
from testkit.costs import FixedCosts
from testkit.harness import TINY_N as N
from testkit.harness import TINY_PROMPTS as PROMPTS
from testkit.harness import TinyMtp as Tiny
from testkit.harness import generate, open_ctx

SOURCES = {"mtp": ("mtp",), "lookup": ("lookup",), "combined": ("mtp", "lookup")}


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
    """Fixed GPU-like costs (rows nearly free, an MTP step 5 % of a verify call), so which source pays
    does not depend on this machine's timing: the policy then mixes both."""
    used = {"mtp": 0, "lookup": 0}
    flat = FixedCosts(StepCosts(tuple([1.0] * 17), {"mtp": 0.05}))
    for prompt, plain in zip(prompts, plain_outputs, strict=True):
        out, stats = tiny.speculative(prompt, None, costs=flat)
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
    from testkit.harness import verify

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


def _rebuild_from(small: Tiny, prompt: np.ndarray, replays: list[int], drop: int = 0):
    """A rebuild for ``small``: restore the prompt's saved state, then decode the replay again
    (minus its last ``drop`` tokens: a broken recovery, for the negative control)."""
    saved = (small.t.state_get(0), small.d.state_get(0), small.mtp.pending_h.copy())

    def rebuild(replay_ids: list[int]) -> None:
        replays.append(len(replay_ids))
        small.t.state_set(saved[0], 0)
        small.d.state_set(saved[1], 0)
        small.mtp.reset(saved[2])
        replay = np.asarray(replay_ids[: len(replay_ids) - drop], dtype=np.int32)
        if len(replay):
            small.t.prefill(replay, len(prompt), on_chunk=small.mtp.process)

    return rebuild


def test_rollback_past_n_rs_seq_is_refused_and_rebuilt(tiny_model, prompts, plain_outputs):
    """A window wider than n_rs_seq cannot be rolled back in place: seq_rm says False, the step asks
    for a rebuild (snapshot + replay), and the output is still plain greedy output."""
    small = Tiny(tiny_model, n_rs_seq=2)
    prompt = prompts[0]
    small.start(prompt)
    replays: list[int] = []
    out, _ = small.speculative(
        prompt, 8, ("mtp", "lookup"), max_window=8, rebuild=_rebuild_from(small, prompt, replays)
    )
    assert out == plain_outputs[0]
    assert replays, "a rollback deeper than n_rs_seq should have needed a rebuild"
    small.close()


def test_a_rebuild_that_ends_elsewhere_raises(tiny_model, prompts):
    """Negative control: a rebuild that leaves the sequence one token short is caught, not decoded on."""
    small = Tiny(tiny_model, n_rs_seq=2)
    prompt = prompts[0]
    small.start(prompt)
    broken = _rebuild_from(small, prompt, [], drop=1)
    with pytest.raises(RollbackFailed, match="expected"):
        small.speculative(prompt, 8, ("mtp", "lookup"), max_window=8, rebuild=broken)
    with pytest.raises(RollbackFailed, match="could not roll back"):  # and none at all
        small.speculative(prompt, 8, ("mtp", "lookup"), max_window=8)
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
        drafters = {"lookup": lookup, "mtp": tiny.mtp}
        run = AnswerRun(tiny.t, tiny.model, drafters, len(prefix) + len(suffix), stats, time.perf_counter())
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
    from testkit.tiny_qwen35 import write_tiny_qwen35

    skipped = Model(tiny_qwen35_path, load_mtp=False)  # layers present but not loaded
    with pytest.raises(LlamaError, match="no MTP layers"):
        open_ctx(skipped, mtp=True)
    skipped.close()
    plain = Model(write_tiny_qwen35(tmp_path / "no-mtp.gguf", with_mtp=False), load_mtp=True)
    assert plain.n_layer_nextn == 0 and not plain.mtp_loaded
    with pytest.raises(LlamaError, match="no MTP layers"):
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
        assert draft_many(drafters, lasts, positions, 3) == alone
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


def test_a_loop_ends_the_answer_and_changes_no_token(tiny, prompts):
    """The tiny random model falls into loops: the answer stops there with finish_reason "repetition",
    and what it emitted is exactly the first tokens of plain greedy decoding without the guard."""
    stopped = 0
    for prompt in prompts:
        tiny.start(prompt)
        pos, token, unguarded = len(prompt), int(tiny.t.logits()[-1].argmax()), []
        for _ in range(4 * N):
            unguarded.append(token)
            tiny.t.decode([token], pos, outputs="all")
            pos += 1
            token = int(tiny.t.logits()[0].argmax())
        for window in (0, 4, 16):
            out, stats = tiny.speculative(prompt, window, SOURCES["combined"], n=4 * N)
            assert out == unguarded[: len(out)], f"window {window} changed a token"
            if stats.finish_reason == "repetition":
                stopped += 1
                assert len(out) < 4 * N
    assert stopped, "no loop in these prompts: the test no longer tests the guard"


def test_accept_drafts_takes_every_draft(tiny, prompts, plain_outputs):
    """The debug mode for random-weight models (DOCQA_DEBUG_ACCEPT_DRAFTS): every MTP draft stands, so a
    step emits its whole window plus the target's token after it, wherever the target disagrees."""
    differs = False
    for prompt, plain in zip(prompts, plain_outputs, strict=True):
        out, stats = tiny.speculative(prompt, 3, ("mtp",), accept_drafts=True)
        assert stats.accepted_tokens == stats.drafted_tokens > 0
        assert out[0] == plain[0]  # the first token is the target's own
        full_steps = stats.verify_steps - 1  # the last may be cut by max_tokens or a loop
        assert stats.drafted_tokens >= 3 * full_steps
        differs |= out != plain[: len(out)]
    assert differs, "the tiny model's MTP drafts are sometimes wrong: accepting all of them must show"


def test_accept_and_reject_drafts_exclude_each_other():
    with pytest.raises(ValueError, match="exclude each other"):
        AnswerParams(max_tokens=4, sampling=SamplingParams(), window=2, reject_drafts=True, accept_drafts=True)
