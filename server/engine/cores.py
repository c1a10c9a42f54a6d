"""How many threads llama.cpp gets, from how busy the machine is with other work (issue 36).

llama.cpp's OpenMP threads meet at a barrier after every operation of a decode. When another process
holds one of the cores, the thread that lost its core arrives late at every barrier and its partner
waits (spinning, with libgomp's default). Beside one busy process on a 2-core Xeon, a 2-thread
decode of the 1.5B reader took 477 ms a token (p90 800; 90 alone), while one thread took 185 ms
beside a 2-thread benchmark (bench/results/omp-wait.md). So when other processes use a core's worth
of CPU, the engine decodes with one thread fewer per core they take, and goes back when they stop.

Other work is measured, not guessed: the machine's busy time (/proc/stat) minus this process's own
(/proc/self/stat), over the last sampling window. Linux only; elsewhere the configured threads stay.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _machine_busy_s() -> float | None:
    """Seconds of CPU the whole machine spent busy since boot (all cores), None off Linux."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    values = [int(x) for x in fields]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return (sum(values[:8]) - idle) / TICKS  # guest time is already counted in user


def _own_busy_s() -> float:
    t = os.times()
    return t.user + t.system


class CoreShare:
    """Chooses the thread count every ``interval_s`` from the cores other processes used.

    ``threads``: the configured count (DOCQA_N_THREADS), the most it ever uses; ``cores``: the CPUs this
    process may run on. Others using at least ``THRESHOLD`` of a core take one thread away per core
    (rounded up); a thread comes back only when the others leave it ``RETURN`` of a core free, so a
    decode does not flap between counts."""

    THRESHOLD = 0.35  # cores of other work that cost a thread
    RETURN = 0.5  # a thread comes back once the other work is below this share of the threshold

    def __init__(
        self,
        threads: int,
        cores: int | None = None,
        interval_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        machine_busy: Callable[[], float | None] = _machine_busy_s,
        own_busy: Callable[[], float] = _own_busy_s,
    ) -> None:
        self.threads = threads
        if cores is None:
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        self.cores = cores
        self.interval_s, self._clock, self._machine, self._own = interval_s, clock, machine_busy, own_busy
        self.current = threads
        self.others = 0.0  # cores of other work in the last window
        self._last = self._sample()

    def _sample(self) -> tuple[float, float, float] | None:
        busy = self._machine()
        return None if busy is None else (self._clock(), busy, self._own())

    def update(self) -> int | None:
        """The new thread count if it changed since the last call, else None (cheap between windows)."""
        if self._last is None or self._clock() - self._last[0] < self.interval_s:
            return None
        now = self._sample()
        if now is None:
            return None
        wall = now[0] - self._last[0]
        self.others = max(0.0, ((now[1] - self._last[1]) - (now[2] - self._last[2])) / wall)
        self._last = now
        free = max(1, self.cores - self._taken())
        want = min(self.threads, free)
        if want == self.current:
            return None
        self.current = want
        return want

    def _taken(self) -> int:
        """Cores the other work holds: one more for every core it uses past THRESHOLD of one; one held
        already is given back only once the other work is RETURN x THRESHOLD below that mark."""
        held = min(self.threads, self.cores) - self.current

        def over(mark: float) -> int:
            return 0 if self.others < mark else int(self.others - mark) + 1

        return max(over(self.THRESHOLD), min(held, over(self.THRESHOLD * self.RETURN)))
