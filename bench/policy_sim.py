"""Record the draft-policy traces that testkit/policy_sim.py replays (needs the embedded model), and
print the replay table of every policy against every trace.

`.venv/bin/python -m bench.policy_sim --record` rewrites tests/spec/traces; without it the recorded
traces are replayed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from spec.cost import StepCosts
from testkit.policy_sim import TRACES, Trace, simulate

QUOTED = "There was nothing so VERY remarkable in that"  # issue 16's quote workload


def record(out: Path, threads: int) -> None:
    """Record the traces of bench/results' workloads with the embedded model (batch-invariant)."""
    import tempfile

    from ingest.extract import extract
    from ingest.prompt import layout_for
    from runtime.embedded import embedded_model_path
    from runtime.llama import Model
    from spec.cost import calibrate
    from testkit.harness import Prompt, open_ctx, plain_greedy, speculative

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
            "costs": {"verify": list(costs.verify), "mtp": costs.draft_steps.get("mtp", 0.0)},
            "calibrated": {"verify": list(calibrated.verify), "mtp": calibrated.draft_steps.get("mtp", 0.0)},
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
