"""The draft policy against recorded answers: how fast each window choice would have been, offline.

With batch-invariant numerics (DOCQA_BATCH_INVARIANT) an answer's tokens do not depend on the draft
window, so one recorded greedy (or seeded) answer fixes what every policy would have emitted. At each
step the lookup drafter proposes a draft from the document and the answer so far; the accepted drafts
are its common prefix with the recorded answer; the step costs what a verify call of that many rows
costs on the machine that recorded it (spec/cost.py, calibrated). So tokens per second of any policy,
adaptive or fixed, can be computed without the model, and compared in a table test
(tests/spec/test_policy.py). ``record`` (needs the model) writes the traces; ``simulate`` replays one.

A trace is JSON: the document prefix and question suffix token ids, the answer's token ids, the
step costs, and the token pieces and unspaced spellings the lookup drafter's resynchronisation reads.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spec.cost import StepCosts
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
    costs: StepCosts
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
    trace: Trace, window: int | None, load: int = 1, policy: Callable[..., DraftPolicy] = DraftPolicy
) -> Outcome:
    """Replay ``trace`` with draft window ``window`` (None: the adaptive policy) at ``load``
    sequences per decode call; lookup drafts only (the embedded model has no MTP head)."""
    lookup = LookupDrafter(
        NgramIndex(np.asarray(trace.prefix, dtype=np.int32), 2, 4),
        lambda t: trace.pieces.get(t, b""),
        lambda t: list(trace.unspaced.get(t, [t])),
    )
    lookup.extend(trace.suffix)
    drafts = policy(DraftConfig(window, ("lookup",)), lookup, None, trace.costs)
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
        target = answer[i + 1 + m]
        drafts.observe(draft, m, target)
        decided = answer[i + 1 : i + 2 + m]
        i += m + 1
        steps, drafted, accepted = steps + 1, drafted + len(draft.tokens), accepted + m
    return Outcome(len(answer) / seconds, steps, drafted, accepted)


def record(out: Path, threads: int) -> None:
    """Record the traces of bench/results' workloads with the embedded model (batch-invariant)."""
    import tempfile

    from bench.harness import Prompt, open_ctx, plain_greedy, prompt_tokens
    from ingest.extract import extract
    from runtime.embedded import embedded_model_path
    from runtime.llama import Model
    from spec.cost import calibrate

    cases = Path(__file__).resolve().parent.parent.parent / "shared/cases"
    alice = extract((cases / "text/gutenberg/alice-in-wonderland-pg11.txt").read_bytes()).text
    crazy = extract((cases / "pdf/pypdf-resources/crazyones.pdf").read_bytes()).text
    spec03 = (cases / "synthetic/agreement-880-tokens.txt").read_text(encoding="utf-8")
    workloads = {
        "reread-alice": (alice[:24_000], "Repeat the document from the beginning, word for word."),
        "quote-alice": (alice[:24_000], f"Copy, word for word, the paragraph that begins with '{QUOTED}'."),
        "extract-alice": (alice[:24_000], "What did Alice see when she looked down the well?"),
        "exact-crazyones": (crazy, "Quote the whole text of the document verbatim."),
        "repeated-spec03": (spec03, "List every clause, word for word."),
        "open-alice": (alice[:24_000], "Write a short poem about the sea that has nothing to do with this text."),
    }  # fmt: skip
    model = Model(embedded_model_path(Path(tempfile.gettempdir()) / "docqa-bench"), extra_bufts=False)
    ctx = open_ctx(
        model, n_ctx=16384, n_threads=threads, n_threads_batch=threads, type_k="q8_0", type_v="q8_0", flash_attn="on"
    )
    ctx.clear()
    costs = calibrate(ctx, max(model.bos, 0), repeats=5)
    out.mkdir(parents=True, exist_ok=True)
    for name, (document, question) in workloads.items():
        prefix, suffix = prompt_tokens(model, document, question)
        answer, _ = plain_greedy(ctx, Prompt(ctx, prefix, suffix), 128)
        ids = set(prefix.tolist()) | set(suffix.tolist()) | set(answer)
        trace = {
            "name": name,
            "prefix": prefix.tolist(),
            "suffix": suffix.tolist(),
            "answer": answer,
            "costs": {"verify": list(costs.verify), "mtp": costs.mtp},
            "pieces": {t: model.piece(t).hex() for t in sorted(ids)},
            "unspaced": {t: model.unspaced(t) for t in sorted(ids) if model.unspaced(t) != [t]},
        }
        (out / f"{name}.json").write_text(json.dumps(trace))
        print(name, len(prefix), len(answer), repr(model.detokenize(answer[:30])))
    ctx.close()
    model.close()


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
