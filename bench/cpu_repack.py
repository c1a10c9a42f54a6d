"""Prefill and decode tok/s with llama.cpp's extra CPU buffer types on and off, in one run (issue 11).

"On" is what docqa's build serves with: the CPU_REPACK kernels, without AMX kernels (the Makefile
builds with -mno-amx-*). "Off" is the alternative fix for the AMX crash, ``use_extra_bufts = False``
(llama-server's --no-repack), which also turns the repacked kernels off. Both load the embedded
Gemma 3 270M Q4_K_M; prefill is ``n_batch``-token chunks of a real text, decode is one row per call
(plain decoding) and a 17-row verify call. Medians of ``--repeats`` runs, alternating the two.

Usage: .venv/bin/python -m bench.cpu_repack [--threads N] [--out bench/results/cpu-repack.md]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from pathlib import Path

from ingest.prompt import plain_layout
from runtime.embedded import embedded_model_path
from runtime.llama import Context, ContextConfig, Model
from runtime.system import system_info

ROOT = Path(__file__).resolve().parent.parent
ALICE = ROOT.parent / "shared/cases/text/gutenberg/alice-in-wonderland-pg11.txt"


def _measure(model: Model, tokens, threads: int) -> dict[str, float]:
    cfg = ContextConfig(n_ctx=4096, n_batch=512, n_ubatch=512, n_threads=threads, n_threads_batch=threads)
    ctx = Context(model, cfg)
    try:
        t0 = time.perf_counter()
        ctx.prefill(tokens, 0)
        prefill = len(tokens) / (time.perf_counter() - t0)
        pos, token = len(tokens), int(ctx.logits()[-1].argmax())
        t0 = time.perf_counter()
        n_decode = 64
        for _ in range(n_decode):
            ctx.decode([token], pos, outputs="all")
            token, pos = int(ctx.logits()[0].argmax()), pos + 1
        decode = n_decode / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        for _ in range(8):
            ctx.decode([token] * 17, pos, outputs="all")
            ctx.logits().argmax(axis=1)
            ctx.seq_rm(0, pos)
        verify_ms = (time.perf_counter() - t0) / 8 * 1000
    finally:
        ctx.close()
    return {"prefill_tok_s": prefill, "decode_tok_s": decode, "verify17_ms": verify_ms}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/cpu-repack.md")
    args = parser.parse_args()
    path = embedded_model_path(Path(tempfile.gettempdir()) / "docqa-bench")
    text = ALICE.read_text(encoding="utf-8")[:8000]
    runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    models = {flag: Model(path, extra_bufts=flag) for flag in (True, False)}
    layout = plain_layout(models[True].add_bos)
    tokens = layout.document_prefix(models[True], text)[:2048]
    for _ in range(args.repeats):
        for flag, model in models.items():
            runs[flag].append(_measure(model, tokens, args.threads))
    med = {flag: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for flag, rs in runs.items()}
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    flags = next(
        (
            line.split(":", 1)[1].split()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("flags")
        ),
        [],
    )
    simd = " ".join(f for f in flags if f.startswith(("avx", "amx")))
    on, off = med[True], med[False]
    lines = [
        "# Extra CPU buffer types on (docqa's build: CPU_REPACK, no AMX kernels) vs off (`use_extra_bufts=False`)",
        "",
        f"One run, {args.repeats} alternating repeats (medians), {args.threads} threads, Gemma 3 270M Q4_K_M, "
        f"{len(tokens)}-token prefill of Alice in 512-token chunks, 64 one-row decodes, 17-row verify calls.",
        "",
        f"- CPU: {cpu} ({platform.machine()}); SIMD flags: {simd}",
        f"- llama.cpp: {system_info()}",
        "",
        "| | prefill tok/s | decode tok/s | 17-row verify ms |",
        "|---|---|---|---|",
        f"| extra buffer types on (repack) | {on['prefill_tok_s']:.0f} | {on['decode_tok_s']:.1f} | "
        f"{on['verify17_ms']:.1f} |",
        f"| off (`use_extra_bufts=False`) | {off['prefill_tok_s']:.0f} | {off['decode_tok_s']:.1f} | "
        f"{off['verify17_ms']:.1f} |",
        f"| speed, on / off | {on['prefill_tok_s'] / off['prefill_tok_s']:.2f}x | "
        f"{on['decode_tok_s'] / off['decode_tok_s']:.2f}x | {off['verify17_ms'] / on['verify17_ms']:.2f}x |",
        "",
    ]
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))
    for model in models.values():
        model.close()


if __name__ == "__main__":
    main()
