"""runtime/gguf_meta.py reads what gguf-py's reader reads: every field and every tensor's shape and
size, on the tiny qwen35 MTP model (all value kinds a model uses: strings, string arrays, numeric
arrays, floats) and on the embedded Gemma (a 262,144-token vocabulary, quantized tensors)."""

from __future__ import annotations

import gguf
import pytest

from runtime import gguf_meta
from runtime.shape import ModelShape


def _same_as_gguf_py(path) -> None:
    reader = gguf.GGUFReader(str(path))
    fields, tensors = gguf_meta.read(path)
    assert {t.name: (t.shape, t.n_bytes) for t in tensors} == {
        t.name: (tuple(int(x) for x in t.shape), int(t.n_bytes)) for t in reader.tensors
    }
    expected = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    assert fields.keys() == expected.keys()
    for key, value in expected.items():
        if isinstance(fields[key], gguf_meta.StringArray):
            assert len(fields[key]) == len(value), key
        else:
            assert fields[key] == pytest.approx(value), key


def test_the_tiny_qwen35_reads_as_with_gguf_py(tiny_qwen35_path):
    _same_as_gguf_py(tiny_qwen35_path)


@pytest.mark.slow  # gguf-py takes 6-22 s to open it on 2 cores (why gguf_meta exists)
def test_the_embedded_model_reads_as_with_gguf_py(gemma_path):
    _same_as_gguf_py(gemma_path)


def test_the_embedded_models_shape_is_read_once(gemma_path):
    shape = ModelShape.from_gguf(gemma_path)
    assert (shape.arch, shape.n_vocab, shape.n_layer) == ("gemma3", 262144, 18)
    assert ModelShape.from_gguf(gemma_path) is shape  # the same file again: not read again


def test_a_file_that_is_no_gguf_is_refused(tmp_path):
    (tmp_path / "x.gguf").write_bytes(b"PK\x03\x04" + bytes(64))
    with pytest.raises(ValueError, match="not a GGUF"):
        gguf_meta.read(tmp_path / "x.gguf")
