"""A GGUF file's metadata and tensor table, read without materializing its big arrays.

gguf-py's ``GGUFReader`` builds a numpy view for every element of every array field, so a model
with a 262,144-token vocabulary (Gemma 3, Qwen3.5) took 6-22 s on 2 cores to open, at every server
start. This reader walks the same layout (the GGUF spec, ggml/docs/gguf.md: header, key/value pairs,
tensor infos, little-endian, version 2 or 3) with ``struct`` over a memory map: numeric arrays are
read as one numpy slice, string arrays only as their length. About 0.1 s for that vocabulary.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAGIC = b"GGUF"
#: GGUF value types (gguf.md): code -> (struct format, numpy dtype); 8 is a string, 9 an array.
_SCALARS = {
    0: ("<B", np.uint8), 1: ("<b", np.int8), 2: ("<H", np.uint16), 3: ("<h", np.int16),
    4: ("<I", np.uint32), 5: ("<i", np.int32), 6: ("<f", np.float32), 7: ("<?", np.bool_),
    10: ("<Q", np.uint64), 11: ("<q", np.int64), 12: ("<d", np.float64),
}  # fmt: skip
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True, slots=True)
class StringArray:
    """An array of strings, kept as its length only (a vocabulary's tokens)."""

    count: int

    def __len__(self) -> int:
        return self.count


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One tensor's entry: ``shape`` lists ne0 first, as gguf-py does; ``n_bytes`` of its data."""

    name: str
    shape: tuple[int, ...]
    n_bytes: int


class _Cursor:
    def __init__(self, buf: mmap.mmap) -> None:
        self.buf, self.pos = buf, 0

    def scalar(self, fmt: str):
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.scalar("<Q")
        raw = self.buf[self.pos : self.pos + n]
        self.pos += n
        return raw.decode("utf-8", errors="replace")

    def value(self, kind: int):
        if kind in _SCALARS:
            return self.scalar(_SCALARS[kind][0])
        if kind == _STRING:
            return self.string()
        if kind != _ARRAY:
            raise ValueError(f"unknown GGUF value type {kind} at byte {self.pos}")
        item, count = self.scalar("<I"), self.scalar("<Q")
        if item in _SCALARS:
            dtype = np.dtype(_SCALARS[item][1])
            values = np.frombuffer(self.buf, dtype=dtype, count=count, offset=self.pos)
            self.pos += count * dtype.itemsize
            return values.tolist()
        if item == _STRING:
            for _ in range(count):  # only the lengths are read
                self.pos += 8 + struct.unpack_from("<Q", self.buf, self.pos)[0]
            return StringArray(count)
        return [self.value(item) for _ in range(count)]  # arrays of arrays: rare and small


def read(path: Path) -> tuple[dict[str, object], list[TensorInfo]]:
    """The key/value metadata (scalars as Python values, numeric arrays as lists, string arrays as
    :class:`StringArray`) and the tensor table of the GGUF at ``path``.

    Raises ValueError for a file that is not a little-endian GGUF of version 2 or 3.
    """
    import gguf  # the quantization block sizes (GGML_QUANT_SIZES), not its reader

    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if buf[:4] != MAGIC:
            raise ValueError(f"{path} is not a GGUF file (no GGUF magic)")
        c = _Cursor(buf)
        c.pos = 4
        version = c.scalar("<I")
        if version not in (2, 3):
            raise ValueError(f"{path}: GGUF version {version} (big-endian, or unknown) is not read here")
        n_tensors, n_kv = c.scalar("<Q"), c.scalar("<Q")
        fields: dict[str, object] = {}
        for _ in range(n_kv):
            key = c.string()
            fields[key] = c.value(c.scalar("<I"))
        tensors = []
        for _ in range(n_tensors):
            name = c.string()
            dims = tuple(c.scalar("<Q") for _ in range(c.scalar("<I")))
            kind = c.scalar("<I")
            c.scalar("<Q")  # the data's offset
            block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(kind)]
            tensors.append(TensorInfo(name, dims, int(np.prod(dims, dtype=np.int64)) // block * size))
    return fields, tensors
