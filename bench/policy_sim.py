"""The draft policy against recorded answers: how fast each window choice would have been, offline.

With batch-invariant numerics (DOCQA_BATCH_INVARIANT) an answer's tokens do not depend on the draft
window, so one recorded greedy (or seeded sampled) answer fixes what every policy would have emitted:
a sampled row consumes one uniform draw per emitted token, so a draft is accepted exactly when it
matches the recorded token. At each step the lookup drafter proposes a draft from the document and
the answer so far; the accepted drafts are its common prefix with the recorded answer; the step
costs what a verify call of that many rows cost on the machine that recorded it, measured at the
answer's own position. The adaptive policy, like the server's, starts from the start-up calibration
(``calibrated``, taken on an empty sequence) and learns the real costs from the steps it makes
(spec/cost.py ``CostModel``). So tokens per second of any policy, adaptive or fixed, can be computed
without the model, and compared in a table test (tests/spec/test_policy.py). ``record`` (needs the
model) writes the traces; ``simulate`` replays one.

A trace is JSON: the document prefix and question suffix token ids, the answer's token ids, the
measured step costs and the start-up calibration, and the token pieces and unspaced spellings the
lookup drafter's resynchronisation reads.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spec.cost import CostModel, StepCosts
from spec.draft import DraftConfig, DraftPolicy
from spec.lookup import LookupDrafter, NgramIndex

TRACES = Path(__file__).resolve().parent.parent / "tests/spec/traces"
QUOTED = "There was nothing so VERY remarkable in that"  # issue 16's quote workload


@dataclass(frozen=True)
class Trace:
    name: str
    prefix: list[int]
    suffix: list[int]
    answer: list[int]  # the emitted tokens, the first one chosen from the question's prefill
    costs: StepCosts  # verify calls of 1..17 rows at the answer's position: what steps really cost
    calibrated: StepCosts  # the start-up calibration the server would have begun with
    pieces: dict[int, bytes]
    unspaced: dict[int, list[int]]

    @classmethod
    def load(cls, path: Path) -> Trace:
        raw = json.loads(path.read_text())
        return cls(
            name=raw["name"],
            prefix=raw["prefix"],
            suffix=raw["suffix"],
            answer=raw["answer"],
            costs=StepCosts(tuple(raw["costs"]["verify"]), raw["costs"]["mtp"]),
            calibrated=StepCosts(tuple(raw["calibrated"]["verify"]), raw["calibrated"]["mtp"]),
            pieces={int(k): bytes.fromhex(v) for k, v in raw["pieces"].items()},
            unspaced={int(k): v for k, v in raw["unspaced"].items()},
        )


@dataclass(frozen=True)
class Outcome:
    tokens_per_s: float  # answer tokens over the summed verify costs
    steps: int
    drafted: int
    accepted: int


def simulate(
    trace: Trace,
    window: int | None,
    load: int = 1,
    policy: Callable[..., DraftPolicy] = DraftPolicy,
    seed: StepCosts | None = None,
    costs: CostModel | None = None,
) -> Outcome:
    """Replay ``trace`` with draft window ``window`` (None: the adaptive policy) at ``load``
    sequences per decode call; lookup drafts only (the embedded model has no MTP head). The policy's
    cost model starts from ``seed`` (default: the trace's start-up calibration) and is told each
    step's true cost, as server/runner.py tells it. ``costs``: a cost model to go on with instead
    (one server answering about several documents keeps one)."""
    lookup = LookupDrafter(
        NgramIndex(np.asarray(trace.prefix, dtype=np.int32), 2, 4),
        lambda t: trace.pieces.get(t, b""),
        lambda t: list(trace.unspaced.get(t, [t])),
    )
    lookup.extend(trace.suffix)
    costs = costs or CostModel(seed or trace.calibrated)
    drafts = policy(DraftConfig(window, ("lookup",)), lookup, None, costs)
    answer, decided = trace.answer, [trace.answer[0]]
    i, seconds, steps, drafted, accepted = 0, 0.0, 0, 0, 0
    while i < len(answer) - 1:
        lookup.extend(decided)
        max_draft = min(len(answer) - 2 - i, 16)
        draft = drafts.propose(answer[i], len(trace.prefix) + len(trace.suffix) + i, max_draft, load)
        m = 0
        while m < len(draft.tokens) and i + 1 + m < len(answer) and draft.tokens[m] == answer[i + 1 + m]:
            m += 1
        seconds += trace.costs.share(len(draft.tokens), load)
        rows = load * (len(draft.tokens) + 1)
        costs.observe(rows, trace.costs.rows(rows))
        target = answer[i + 1 + m]
        drafts.observe(draft, m, target)
        decided = answer[i + 1 : i + 2 + m]
        i += m + 1
        steps, drafted, accepted = steps + 1, drafted + len(draft.tokens), accepted + m
    return Outcome(len(answer) / seconds, steps, drafted, accepted)


def record(out: Path, threads: int) -> None:
    """Record the traces of bench/results' workloads with the embedded model (batch-invariant)."""
    import tempfile

    from bench.harness import Prompt, open_ctx, plain_greedy, speculative
    from ingest.extract import extract
    from ingest.prompt import layout_for
    from runtime.embedded import embedded_model_path
    from runtime.llama import Model
    from spec.cost import calibrate

    cases = Path(__file__).resolve().parent.parent.parent / "shared/cases"
    # The documents as bench/windows.py uploads them, extracted as the server ingests them.
    raw = (cases / "text/gutenberg/alice-in-wonderland-pg11.txt").read_bytes().decode("utf-8-sig")
    alice = extract(raw[:24_000].encode()).text
    crazy = extract((cases / "pdf/pypdf-resources/crazyones.pdf").read_bytes()).text
    spec03 = extract((cases / "synthetic/agreement-880-tokens.txt").read_bytes()).text
    workloads = {
        "reread-alice": (alice, "Repeat the document from the beginning, word for word."),
        "quote-alice": (alice, f"Copy, word for word, the paragraph that begins with '{QUOTED}'."),
        "extract-alice": (alice, "What did Alice see when she looked down the well?"),
        "exact-crazyones": (crazy, "Quote the whole text of the document verbatim."),
        "repeated-spec03": (spec03, "List every clause, word for word."),
        "open-alice": (alice, "Write a short poem about the sea that has nothing to do with this text."),
        "open-sampled-alice": (alice, "Write a short poem about the sea."),
    }  # fmt: skip
    model = Model(embedded_model_path(Path(tempfile.gettempdir()) / "docqa-bench"), extra_bufts=False)
    ctx = open_ctx(
        model, n_ctx=16384, n_threads=threads, n_threads_batch=threads, type_k="q8_0", type_v="q8_0", flash_attn="on"
    )
    ctx.clear()
    calibrated = calibrate(ctx, max(model.bos, 0), repeats=5)
    layout = layout_for(model)  # the server's prompt: its answers are the ones to replay
    out.mkdir(parents=True, exist_ok=True)
    for name, (document, question) in workloads.items():
        prefix, suffix = layout.document_prefix(model, document), layout.question_suffix(model, question)
        prompt = Prompt(ctx, prefix, suffix)
        if "sampled" in name:  # plain decoding at temperature 0.8 (bench/windows.py asks with seed 3, which
            # ends after 20 tokens here: EOS)
            answer = [int(t) for t in speculative(ctx, prompt, 128, 0, temperature=0.8, seed=1, stops=())[0]]
        else:
            answer, _ = plain_greedy(ctx, prompt, 128)
        costs = _costs_at(ctx, prompt, answer[0])
        ids = set(prefix.tolist()) | set(suffix.tolist()) | set(answer)
        trace = {
            "name": name,
            "prefix": prefix.tolist(),
            "suffix": suffix.tolist(),
            "answer": answer,
            "costs": {"verify": list(costs.verify), "mtp": costs.mtp},
            "calibrated": {"verify": list(calibrated.verify), "mtp": calibrated.mtp},
            "pieces": {t: model.piece(t).hex() for t in sorted(ids)},
            "unspaced": {t: model.unspaced(t) for t in sorted(ids) if model.unspaced(t) != [t]},
        }
        (out / f"{name}.json").write_text(json.dumps(trace))
        print(name, len(prefix), len(answer), repr(model.detokenize(answer[:30])))
    ctx.close()
    model.close()


def _costs_at(ctx, prompt, token: int, repeats: int = 5) -> StepCosts:
    """Verify calls of 1..17 rows where the answer starts (logits for every row, then the argmax a
    greedy accept takes), medians of ``repeats``: what a step of each window really costs there."""
    import statistics
    import time

    prompt.start(ctx)
    pos = len(prompt.prefix) + len(prompt.suffix)
    verify = []
    for rows in range(1, 18):
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            ctx.decode([token] * rows, pos, outputs="all")
            ctx.logits().argmax(axis=1)
            times.append(time.perf_counter() - t0)
            ctx.seq_rm(0, pos)
        verify.append(statistics.median(times))
    return StepCosts(tuple(verify))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="record the traces again (needs the model)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if args.record:
        record(TRACES, args.threads)
    for path in sorted(TRACES.glob("*.json")):
        trace = Trace.load(path)
        fixed = {w: simulate(trace, w).tokens_per_s for w in (0, 1, 2, 4, 8, 16)}
        best = max(fixed, key=fixed.get)
        adaptive = simulate(trace, None).tokens_per_s
        row = " ".join(f"{w}:{v:6.1f}" for w, v in fixed.items())
        print(f"{trace.name:18s} {row}  adaptive {adaptive:6.1f} = {adaptive / fixed[best]:.2f}x best ({best})")


if __name__ == "__main__":
    main()
