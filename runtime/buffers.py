"""The buffer sizes llama.cpp reports while it loads a model and creates a context.

llama.cpp logs each allocation it makes as one line, and ``runtime.llama`` routes those lines to the
``docqa.llama`` logger at DEBUG level. The lines this module reads (vendored llama.cpp 0.3.36):

* ``load_tensors:   CPU_Mapped model buffer size =   235.16 MiB``      (src/llama-model.cpp)
* ``llama_kv_cache:        CPU KV buffer size =     6.38 MiB``        (src/llama-kv-cache.cpp)
* ``llama_memory_recurrent:  CPU RS buffer size =     0.56 MiB``     (src/llama-memory-recurrent.cpp)
* ``sched_reserve:        CPU compute buffer size =   514.50 MiB``    (src/llama-context.cpp)
* ``llama_context:        CPU  output buffer size =     1.00 MiB``    (src/llama-context.cpp)

Sizes are printed in MiB with two decimals, so each is known to +-0.005 MiB (about 5 KiB).
:func:`capture_buffers` collects them; the memory planner's tests compare its estimates with them.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

LLAMA_LOGGER = "docqa.llama"
MIB = 1024**2

_LINE = re.compile(
    r"^~?\w+:\s+(?P<backend>\S+)\s+(?P<kind>model|KV|RS|compute|output) buffer size =\s*(?P<mib>[0-9.]+) MiB\s*$"
)


@dataclass(frozen=True, slots=True)
class BufferEntry:
    """One allocation: ``kind`` is model, KV, RS, compute or output; ``backend`` the buffer type
    (CPU, CPU_Mapped, CPU_REPACK, CUDA0, CUDA_Host...); ``size`` in bytes (rounded from MiB)."""

    kind: str
    backend: str
    size: int


def parse_line(line: str) -> BufferEntry | None:
    """The allocation a llama.cpp log line reports, or None for any other line.

    >>> parse_line("load_tensors:   CPU_Mapped model buffer size =   235.16 MiB")
    BufferEntry(kind='model', backend='CPU_Mapped', size=246585508)
    """
    m = _LINE.match(line.strip())
    if m is None:
        return None
    return BufferEntry(m["kind"], m["backend"], round(float(m["mib"]) * MIB))


@dataclass
class BufferLog:
    """Allocations seen while a :func:`capture_buffers` block ran, in log order."""

    entries: list[BufferEntry] = field(default_factory=list)

    def total(self, kind: str, backends: tuple[str, ...] | None = None) -> int:
        """Sum of the ``kind`` allocations in bytes, optionally only on the named backends."""
        return sum(e.size for e in self.entries if e.kind == kind and (backends is None or e.backend in backends))

    def clear(self) -> None:
        self.entries.clear()


class _Handler(logging.Handler):
    def __init__(self, sink: BufferLog) -> None:
        super().__init__(logging.DEBUG)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        entry = parse_line(record.getMessage())
        if entry is not None:
            self.sink.entries.append(entry)


@contextmanager
def capture_buffers() -> Iterator[BufferLog]:
    """Collect the buffer sizes llama.cpp logs inside the ``with`` block.

    The ``docqa.llama`` logger is lowered to DEBUG for the duration (its lines are DEBUG records),
    then restored. The backend must route logs there, which ``runtime.llama`` does on first use.
    """
    logger = logging.getLogger(LLAMA_LOGGER)
    sink = BufferLog()
    handler = _Handler(sink)
    previous = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        yield sink
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
