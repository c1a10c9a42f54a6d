"""Speculation costs and acceptance, for the closing notes of the MTP work.

1. Per-step cost of a verify call with window 0 (1 row), 1, 2, 4, 8 and 16 on the embedded model at a
   ~5k-token context (median of repeated calls), as a ratio to the 1-row decode.
2. Recurrent-state memory as n_rs_seq grows (llama.cpp's own buffer-size log lines), on the tiny
   hybrid qwen35 model.
3. Acceptance and decode rate of MTP only, lookup only, combined (verify16) and the default adaptive
   mode on the tiny model (random weights: its numbers show mechanics, not quality).

Usage: .venv/bin/python -m bench.spec_costs [--out bench/results/spec_costs.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ingest.prompt import plain_layout  # noqa: E402
from runtime.embedded import embedded_model_path  # noqa: E402
from runtime.llama import Model  # noqa: E402
from testkit.harness import open_ctx  # noqa: E402
from testkit.tiny_qwen35 import write_tiny_qwen35  # noqa: E402

ALICE = ROOT.parent / "shared/cases/text/gutenberg/alice-in-wonderland-pg11.txt"


def window_costs(threads: int, repeats: int) -> dict:
    model = Model(embedded_model_path(Path(tempfile.mkdtemp())))
    ctx = open_ctx(model, n_ctx=8192, n_threads=threads, n_threads_batch=threads)
    text = ALICE.read_text(encoding="utf-8-sig")[:20_000]
    prefix = plain_layout(model.add_bos).document_prefix(model, text)
    ctx.prefill(prefix, 0)
    pos = len(prefix)
    out = {}
    for window in (0, 1, 2, 4, 8, 16):
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            ctx.decode([int(prefix[-1])] * (window + 1), pos, outputs="all")
            ctx.logits().argmax(axis=1)
            times.append(time.perf_counter() - t0)
            ctx.seq_rm(0, pos)
        out[window] = round(statistics.median(times) * 1000, 2)
    base = out[0]
    ctx.close()
    model.close()
    return {"context_tokens": len(prefix), "ms": out, "ratio_to_1_row": {k: round(v / base, 2) for k, v in out.items()}}


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def rs_memory(tiny: Path) -> dict:
    capture = _Capture()
    logger = logging.getLogger("docqa.llama")
    logger.addHandler(capture)
    logger.setLevel(logging.DEBUG)
    model = Model(tiny, load_mtp=True)
    out = {}
    for n_rs_seq in (0, 2, 4, 8, 16):
        capture.lines.clear()
        ctx = open_ctx(model, n_ctx=4096, n_rs_seq=n_rs_seq, n_batch=64, n_ubatch=64, n_threads=1)
        ctx.close()
        sizes = [
            float(m.group(1)) for line in capture.lines if (m := re.search(r"RS buffer size =\s*([\d.]+) MiB", line))
        ]
        out[n_rs_seq] = sizes[0] if sizes else None
    logger.removeHandler(capture)
    model.close()
    return {"rs_buffer_mib": out, "per_plane_mib": round(out[0], 4) if out[0] else None}


def tiny_modes(tiny: Path) -> dict:
    from testkit.harness import TINY_PROMPTS as PROMPTS
    from testkit.harness import TinyMtp as Tiny

    model = Model(tiny, load_mtp=True)
    runner = Tiny(model)
    modes = {
        "plain": (0, ("mtp", "lookup")),
        "mtp_3": (3, ("mtp",)),
        "lookup_8": (8, ("lookup",)),
        "combined_verify16": (16, ("mtp", "lookup")),
        "adaptive": (None, ("mtp", "lookup")),
    }
    out = {}
    for name, (window, sources) in modes.items():
        drafted = {"mtp": 0, "lookup": 0}
        accepted = {"mtp": 0, "lookup": 0}
        steps = tokens = 0
        elapsed = 0.0
        for text in PROMPTS:
            prompt = model.tokenize(text, parse_special=False)
            t0 = time.perf_counter()
            result, stats = runner.speculative(prompt, window, sources, n=96)
            elapsed += time.perf_counter() - t0
            tokens += len(result)
            steps += stats.verify_steps
            for k in drafted:
                drafted[k] += stats.drafted_by_source[k]
                accepted[k] += stats.accepted_by_source[k]
        out[name] = {
            "drafted": drafted,
            "accepted": accepted,
            "acceptance": {k: round(accepted[k] / drafted[k], 3) if drafted[k] else None for k in drafted},
            "tokens_per_step": round(tokens / steps, 2),
            "tokens_per_s": round(tokens / elapsed, 1),
        }
    runner.close()
    model.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/spec_costs.json")
    args = parser.parse_args()
    tiny = write_tiny_qwen35(Path(tempfile.mkdtemp()) / "tiny.gguf")
    results = {
        "window_cost_embedded": window_costs(args.threads, args.repeats),
        "rs_memory_tiny": rs_memory(tiny),
        "modes_tiny": tiny_modes(tiny),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
