"""OpenMP's wait policy, measured: reading and decoding alone and beside busy processes.

llama.cpp's CPU backend runs each graph on an OpenMP team; between operations its threads wait at
barriers. libgomp's default (``OMP_WAIT_POLICY`` unset) spins for a while before sleeping, which is
fastest on an idle machine and loses a whole time slice whenever a partner thread is descheduled
beside other work. This benchmark runs the same probe in a fresh process per policy (libgomp reads
the environment once, when it is loaded), alone and beside N single-threaded busy loops, and reports
the ratio of each policy to the default in the same run.

    python -m bench.omp_wait [--model qwen-coder-1.5b] [--busy 0,1,2] [--out bench/results/omp-wait]

Probe (per policy and load): prefill 512 tokens (median of 2, tok/s), 48 one-token decodes after a
1,024-token prompt (median ms/token and p90), one 17-row verify (median of 4, ms).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# libgomp's own default is to spin 300,000 times before sleeping (GOMP_SPINCOUNT, libgomp manual); it is
# written out so that docqa's start-up default (runtime/omp.py) leaves the "default" cell alone.
POLICIES = {
    "default": {"GOMP_SPINCOUNT": "300000"},
    "PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE"},
    "ACTIVE": {"OMP_WAIT_POLICY": "ACTIVE"},
    **{f"spin{n}": {"GOMP_SPINCOUNT": str(n)} for n in (1000, 10000, 30000, 100000)},
}
TEXT = ROOT / "README.md"


def probe(model: str, threads: int = 2) -> dict:
    """Run in the child: load ``model``, measure, return the numbers (the environment is already set)."""
    import numpy as np

    from runtime.llama import Context, ContextConfig, Model
    from runtime.models import model_path

    m = Model(model_path(model, Path(os.environ.get("DOCQA_MODELS_DIR", "/tmp/docqa-models"))))
    ctx = Context(m, ContextConfig(n_ctx=4096, n_batch=512, n_ubatch=512, n_threads=threads, n_threads_batch=threads))
    text = TEXT.read_text(encoding="utf-8") * 4
    ids = m.tokenize(text, parse_special=False)[:2048].astype(np.int32)
    pp = []
    for _ in range(2):
        ctx.clear()
        t = time.perf_counter()
        ctx.decode(ids[:512], 0, outputs="last")
        pp.append(512 / (time.perf_counter() - t))
    ctx.clear()
    ctx.prefill(ids[:1024], 0)
    tok, pos, tg = int(np.argmax(ctx.logits()[-1])), 1024, []
    for _ in range(48):
        t = time.perf_counter()
        ctx.decode([tok], pos, outputs="last")
        tg.append(1000 * (time.perf_counter() - t))
        tok, pos = int(np.argmax(ctx.logits()[-1])), pos + 1
    ver = []
    for _ in range(4):
        t = time.perf_counter()
        ctx.decode(ids[1100:1117], pos, outputs="all")
        ver.append(1000 * (time.perf_counter() - t))
        ctx.seq_rm(0, pos)
    tg.sort()
    return {
        "prefill_tok_s": round(statistics.median(pp), 1),
        "decode_ms": round(statistics.median(tg), 1),
        "decode_p90_ms": round(tg[int(0.9 * len(tg))], 1),
        "verify17_ms": round(statistics.median(ver), 1),
    }


BUSY = "import time\nt = time.time() + 600\nwhile time.time() < t: pass\n"


def run_one(model: str, policy: str, busy: int, threads: int = 2) -> dict:
    """One fresh child process under ``policy`` beside ``busy`` busy loops."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(POLICIES[policy])
    env["PYTHONPATH"] = str(ROOT)
    loops = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(busy)]
    try:
        out = subprocess.run(
            [sys.executable, "-m", "bench.omp_wait", "--probe", model, "--threads", str(threads)],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=900,
            check=True,
        )
    finally:
        for p in loops:
            p.kill()
            p.wait()
    return json.loads(out.stdout.strip().splitlines()[-1])


def report(rows: list[dict], cpu: str, load: str) -> str:
    base = {r["busy"]: r for r in rows if r["policy"] == "default"}
    lines = [
        "# OpenMP wait policy: reading and decoding alone and beside busy processes",
        "",
        f"CPU: {cpu}. Load before the run: {load}. `python -m bench.omp_wait`, 2 threads, one fresh process",
        "per cell; a busy process is a single-threaded Python loop. Ratios are against the default policy",
        "(`OMP_WAIT_POLICY` unset) beside the same load in the same run.",
        "",
        "| policy | busy beside | prefill tok/s | decode ms/token (p90) | verify 17 rows ms | decode vs default |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        b = base.get(r["busy"])
        ratio = f"{b['decode_ms'] / r['decode_ms']:.2f}x" if b else "-"
        lines.append(
            f"| {r['policy']} | {r['busy']} | {r['prefill_tok_s']} | {r['decode_ms']} ({r['decode_p90_ms']}) "
            f"| {r['verify17_ms']} | {ratio} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--probe", help=argparse.SUPPRESS)
    ap.add_argument("--model", default="qwen-coder-1.5b")
    ap.add_argument("--policies", default="default,PASSIVE")
    ap.add_argument("--busy", default="0,1,2")
    ap.add_argument("--threads", default="2", help="llama.cpp threads, e.g. 2,1")
    ap.add_argument("--out", default=str(ROOT / "bench/results/omp-wait"))
    a = ap.parse_args()
    if a.probe:
        print(json.dumps(probe(a.probe, int(a.threads))))
        return
    cpu = subprocess.run(["sh", "-c", "lscpu | sed -n 's/^Model name: *//p'"], capture_output=True, text=True)
    load = Path("/proc/loadavg").read_text().split()[:3]
    rows = []
    for busy in [int(b) for b in a.busy.split(",")]:
        for policy in a.policies.split(","):
            for threads in [int(t) for t in a.threads.split(",")]:
                r = {"policy": policy, "busy": busy, "threads": threads, **run_one(a.model, policy, busy, threads)}
                print(r, flush=True)
                rows.append(r)
    md = report(rows, cpu.stdout.strip() + f", {os.cpu_count()} cores", " ".join(load))
    Path(a.out + ".json").write_text(json.dumps({"model": a.model, "rows": rows}, indent=1))
    Path(a.out + ".md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
