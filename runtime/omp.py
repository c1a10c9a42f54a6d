"""How llama.cpp's CPU threads wait: OpenMP's wait policy, chosen before libgomp is loaded.

llama.cpp runs each graph on an OpenMP team, whose threads wait at a barrier between operations.
libgomp (GCC's OpenMP runtime) reads ``OMP_WAIT_POLICY`` and ``GOMP_SPINCOUNT`` once, when it is
loaded (with llama_cpp's shared library), so the choice must be in the environment before
``import llama_cpp``: runtime/__init__.py calls :func:`apply` first thing.

Left to itself libgomp spins 300,000 times before it sleeps (libgomp manual, "GOMP_SPINCOUNT"). On an
idle machine that is the fastest; beside any other busy process a spinning thread burns the core its
partner needs and the decode collapses. Measured with bench/omp_wait.py on a 2-core Intel Xeon (AMX),
Qwen2.5-Coder-1.5B Q4_K_M, 2 threads (bench/results/omp-wait.md):

==========================  ===================  ==============================
wait                        decode alone (ms/t)  decode beside 1 busy process
==========================  ===================  ==============================
libgomp default (300,000)   90-93                477 (p90 800)
``GOMP_SPINCOUNT=30000``    100                  445
``GOMP_SPINCOUNT=10000``    111                  275
``GOMP_SPINCOUNT=1000``     106-119              194 (p90 215)
``OMP_WAIT_POLICY=PASSIVE`` 135-136              184 (p90 214)
==========================  ===================  ==============================

No one setting wins both: 1,000 spins is 0.78-0.88x libgomp's default alone (prefill 0.87-0.92x) and
2.46x faster beside one busy process; ``PASSIVE`` is 0.67x alone. docqa keeps libgomp's default
(:data:`DEFAULT` adds nothing), the fastest alone, and removes the cause of the collapse instead: beside
other work the engine decodes with one thread fewer per busy core (server/engine/cores.py,
``DOCQA_ADAPT_THREADS``), and one thread has no partner to wait for (185 ms a token beside a 2-thread
benchmark, p90 233, against a p90 of 2.5 s with two spinning threads). A user who set either variable
keeps theirs (``GOMP_SPINCOUNT=1000`` for a machine whose other work comes and goes in bursts).
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

#: docqa's choice when the user set neither variable: the environment it adds (none: libgomp's default).
DEFAULT: dict[str, str] = {}
VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")

_chosen: str | None = None


def apply(environ: MutableMapping[str, str] | None = None) -> str:
    """Add :data:`DEFAULT` to ``environ`` unless the user set ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT``.

    Returns the description :func:`described` gives afterwards, e.g. ``"libgomp's default (spin
    300,000 times, then sleep)"`` or ``"OMP_WAIT_POLICY=PASSIVE (set by the user)"``. Takes effect only
    if llama_cpp was not imported yet in this process (libgomp reads the environment when it is loaded).
    ``environ``: this process's environment when None (and then :func:`described` reports it).
    """
    global _chosen
    env = os.environ if environ is None else environ
    given = {k: env[k] for k in VARIABLES if k in env}
    if given:
        chosen = " ".join(f"{k}={v}" for k, v in given.items()) + " (set by the user)"
    elif DEFAULT:
        env.update(DEFAULT)
        chosen = " ".join(f"{k}={v}" for k, v in DEFAULT.items()) + " (docqa's default)"
    else:
        chosen = "libgomp's default (spin 300,000 times, then sleep)"
    if environ is None:
        _chosen = chosen
    return chosen


def described() -> str:
    """How this process's OpenMP threads wait (for /health and the start-up log)."""
    return _chosen or "libgomp's default (runtime.omp.apply was not called before llama_cpp)"
