"""One model load in a process of its own, for bench/device/run.sh to tell what crashes inside llama.cpp.

A crash in llama.cpp kills the process with a signal and leaves no Python error, so run.sh loads the
model again in small variations, each in a child process (this module), and once under ``cuda-gdb``
for the native backtrace; each prints one line, ``probe: loaded ...`` or nothing before it dies.

``python -m bench.device.probe PATH [--no-mtp] [--ngl N] [--no-callback]``; ``--write-tiny PATH`` /
``--write-27b PATH --layers N`` write the tiny test model or Qwen3.5-27B's shapes at N blocks first.
``--no-callback`` leaves llama.cpp's own stderr logging in place of runtime/backend.py's Python
callback, to tell the callback apart from the loader.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def write(args: argparse.Namespace) -> Path:
    if args.write_tiny:
        from testkit.tiny_qwen35 import write_tiny_qwen35

        write_tiny_qwen35(args.write_tiny)
        return args.write_tiny
    from testkit.qwen35_shapes import QWEN35_27B
    from testkit.random_qwen35 import write_random_qwen35

    write_random_qwen35(args.write_27b, QWEN35_27B.with_layers(args.layers) if args.layers < 64 else QWEN35_27B)
    return args.write_27b


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("path", type=Path, nargs="?")
    p.add_argument("--no-mtp", action="store_true")
    p.add_argument("--ngl", type=int, default=-1)
    p.add_argument("--no-callback", action="store_true")
    p.add_argument("--write-tiny", type=Path)
    p.add_argument("--write-27b", type=Path)
    p.add_argument("--layers", type=int, default=8)
    args = p.parse_args()
    if args.write_tiny or args.write_27b:
        print(f"probe: wrote {write(args)}", flush=True)  # noqa: T201
        return
    if args.no_callback:
        from llama_cpp import llama_cpp as C

        from runtime import backend

        C.llama_backend_init()
        backend._backend_ready = True  # llama.cpp keeps its default logger (stderr)
    from runtime.model import Model

    t0 = time.perf_counter()
    model = Model(args.path, n_gpu_layers=args.ngl, load_mtp=not args.no_mtp)
    took = time.perf_counter() - t0
    print(
        f"probe: loaded {args.path.name} in {took:.1f} s: {model.description}, nextn {model.n_layer_nextn}", flush=True
    )  # noqa: T201


if __name__ == "__main__":
    main()
