"""Reading speed: docqa's ingestion against the kernel's own numbers, on this CPU (issue 36).

For each configuration (model file x llama.cpp build x micro-batch x flash attention), two numbers
in the same run:

* **the kernel**, driven the way llama-bench drives it, through the same llama.cpp build docqa
  loads: ``pp512`` (one 512-token prompt decoded in one call, median of 3) and ``tg128`` (128
  one-token decodes after it), 2 threads;
* **docqa**: a real server (``python -m server``) reading a ~3k-token text (upload to ``ready``),
  in tokens per second of its prompt prefix.

The headline is docqa's ingestion tok/s divided by the kernel's pp512. The CPU's flags and
llama.cpp's system info are printed beside them. A build is a directory of llama-cpp-python's
shared libraries (``--lib``: ``LLAMA_CPP_LIB_PATH``; ``default`` is the installed one); a model
file is a name of runtime/models.py or a GGUF path. Results: ``--out`` (.json and .md).

Run on an idle machine: ``python -m bench.prefill`` (``--help`` for the levers).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEXT = ROOT.parent / "shared" / "cases" / "text" / "gutenberg" / "alice-in-wonderland-pg11.txt"
TEXT_CHARS = 12_000  # about 3k tokens


def resolve(model: str) -> Path:
    """A runtime/models.py name (assembled under the temp dir), a GGUF path, or ``NAME@TYPE``: that
    model requantized once to TYPE (runtime/quantize.py ``FTYPES``; ``TYPE-pure``: every tensor in it)."""
    if model.endswith(".gguf"):
        return Path(model)
    from runtime.models import model_path

    name, _, ftype = model.partition("@")
    path = model_path(name, Path(tempfile.gettempdir()) / "docqa-models")
    if not ftype:
        return path
    from runtime.quantize import requantize

    base, pure = ftype.removesuffix("-pure"), ftype.endswith("-pure")
    return requantize(path, path.with_name(f"{path.stem}-{ftype}.gguf"), base, pure=pure)


def kernel(path: Path, threads: int, ubatch: int, flash_attn: str, extra_bufts: bool) -> dict:
    """pp512 and tg128 of ``path`` through the loaded llama.cpp build (run in a child: the build is
    chosen by LLAMA_CPP_LIB_PATH at import)."""
    import numpy as np

    from runtime.llama import Context, ContextConfig, Model
    from runtime.system import system_info

    model = Model(path, extra_bufts=extra_bufts)
    ctx = Context(model, ContextConfig(n_ctx=2048, n_batch=512, n_ubatch=ubatch, n_threads=threads,
                                       n_threads_batch=threads, flash_attn=flash_attn))  # fmt: skip
    ids = model.tokenize(TEXT.read_text(encoding="utf-8")[5000:20000], parse_special=False)[:512].astype(np.int32)
    pp = []
    for _ in range(3):
        ctx.clear()
        t0 = time.perf_counter()
        ctx.decode(ids, 0, outputs="last")
        pp.append(512 / (time.perf_counter() - t0))
    token, pos, tg = int(np.argmax(ctx.logits()[-1])), 512, []
    for _ in range(128):
        t0 = time.perf_counter()
        ctx.decode([token], pos, outputs="last")
        tg.append(time.perf_counter() - t0)
        token, pos = int(np.argmax(ctx.logits()[-1])), pos + 1
    out = {"pp512": statistics.median(pp), "tg128": 128 / sum(tg), "system_info": system_info()}
    ctx.close()
    model.close()
    return out


def run_kernel(path: Path, lib: str, threads: int, ubatch: int, flash_attn: str, extra_bufts: bool) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if lib != "default":
        env["LLAMA_CPP_LIB_PATH"] = lib
    args = [sys.executable, "-m", "bench.prefill", "--child", json.dumps([str(path), threads, ubatch, flash_attn,
                                                                           extra_bufts])]  # fmt: skip
    done = subprocess.run(args, env=env, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        return {"error": f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}" if done.stderr else ""}
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_docqa(path: Path, lib: str, threads: int, ubatch: int, flash_attn: str, extra: bool = True) -> dict:
    """Upload the ~3k-token text to a fresh server and time it to ``ready``; ``extra``: llama.cpp's extra
    CPU buffer types (DOCQA_CPU_REPACK auto, else off)."""
    from testkit.live import Live

    data = Path(tempfile.mkdtemp(prefix="docqa-prefill-"))
    env = {"DOCQA_N_THREADS": str(threads), "DOCQA_N_UBATCH": str(ubatch), "DOCQA_FLASH_ATTN": flash_attn,
           "DOCQA_N_CTX": "8192", "DOCQA_CPU_REPACK": "auto" if extra else "off"}  # fmt: skip
    if lib != "default":
        env["LLAMA_CPP_LIB_PATH"] = lib
    live = Live(data / "data", path, **env)
    live.start(timeout=900)
    try:
        _, info, seconds = read_text(live, TEXT_CHARS)
    finally:
        live.stop()
    return {"tokens": info["tokens"], "seconds": seconds, "ingest_tps": info["tokens"] / seconds}


def read_text(live, chars: int, timeout: float = 3600) -> tuple[str, dict, float]:
    """Upload ``chars`` characters of the text to ``live`` and wait until it is read: (its id, the
    document as the API shows it then, seconds from upload to ready)."""
    text = TEXT.read_text(encoding="utf-8")[5000 : 5000 + chars]
    t0 = time.perf_counter()
    _, created = live.upload("alice.txt", text.encode())
    info = live.wait_ready(created["id"], timeout=timeout)
    return created["id"], info, time.perf_counter() - t0


def cpu_flags() -> str:
    flags = next((line.split(":", 1)[1].split() for line in open("/proc/cpuinfo") if line.startswith("flags")), [])
    keep = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_int8", "amx_bf16", "amx_tile")
    return " ".join(f for f in flags if f in keep)


def report(results: dict) -> str:
    m = results["machine"]
    lines = [
        "# Reading speed: docqa's ingestion against the kernel (bench/prefill.py)",
        "",
        f"CPU: {m['cpu']}, {m['cores']} cores; flags: {m['flags']}; load before/after: {m['load_before']} / "
        f"{m['load_after']}. Kernel: pp512 and tg128 through the same llama.cpp build (2 threads unless said); "
        "docqa: a ~3k-token text uploaded to a fresh server, upload to ready.",
        "",
        "| model | build | n_ubatch | flash attn | pp512 tok/s | tg128 tok/s | docqa ingest tok/s | docqa / pp512 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results["rows"]:
        k, d = r["kernel"], r.get("docqa") or {}
        build = r["lib"] if r.get("repack", True) else f"{r['lib']}, no repack"
        if "error" in k:
            lines.append(f"| {r['model']} | {build} | {r['ubatch']} | {r['fa']} | {k['error']} | | | |")
            continue
        ratio = f"{d['ingest_tps'] / k['pp512']:.2f}" if d else "-"
        ingest = f"{d['ingest_tps']:.1f}" if d else "-"
        lines.append(f"| {r['model']} | {build} | {r['ubatch']} | {r['fa']} | {k['pp512']:.1f} | {k['tg128']:.1f} "
                     f"| {ingest} | {ratio} |")  # fmt: skip
    infos = {r["lib"]: r["kernel"].get("system_info", "") for r in results["rows"]}
    lines += ["", *[f"* `{lib}`: {info}" for lib, info in infos.items()], ""]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--models", default="qwen-coder-1.5b,gemma-270m", help="names, GGUF paths, NAME@q4_0 (requantized)")
    p.add_argument("--lib", default="default", help="comma-separated llama-cpp-python lib directories")
    p.add_argument("--ubatch", default="512")
    p.add_argument("--fa", default="auto")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--no-extra-bufts", action="store_true", help="the kernel without AMX/REPACK buffer types")
    p.add_argument("--no-docqa", action="store_true", help="the kernel numbers only")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "prefill")
    args = p.parse_args()
    if args.child:
        path, threads, ubatch, fa, extra = json.loads(args.child)
        print(json.dumps(kernel(Path(path), threads, ubatch, fa, extra)))  # noqa: T201
        return
    from bench.quality import machine

    load0 = os.getloadavg()
    rows = []
    for model in args.models.split(","):
        path = resolve(model)
        for lib in args.lib.split(","):
            for ubatch in (int(u) for u in args.ubatch.split(",")):
                for fa in args.fa.split(","):
                    k = run_kernel(path, lib, args.threads, ubatch, fa, not args.no_extra_bufts)
                    d = None
                    if not args.no_docqa and "error" not in k:
                        d = run_docqa(path, lib, args.threads, ubatch, fa, not args.no_extra_bufts)
                    rows.append({"model": model, "lib": lib, "repack": not args.no_extra_bufts, "ubatch": ubatch,
                                 "fa": fa, "kernel": k, "docqa": d})  # fmt: skip
                    print(json.dumps(rows[-1]), flush=True)
    results = {"rows": rows, "machine": {**machine(), "flags": cpu_flags(), "load_before": load0,
                                         "load_after": os.getloadavg()}}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=1))
    args.out.with_suffix(".md").write_text(report(results))
    print(report(results))


if __name__ == "__main__":
    main()
