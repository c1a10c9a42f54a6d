"""runtime/quantize.py: llama.cpp's quantizer behind one call (the F16 copy of tests/conftest.py runs it
on the embedded model for every test that asks for gemma_f16_path)."""

from __future__ import annotations

import pytest

from runtime.quantize import requantize


def test_the_f16_copy_loads_with_f16_weights(gemma_f16_path):
    from runtime.gguf_meta import read

    fields, _ = read(gemma_f16_path)
    assert fields["general.file_type"] == 1  # LLAMA_FTYPE_MOSTLY_F16
    assert not list(gemma_f16_path.parent.glob(f".{gemma_f16_path.name}.*.tmp"))  # no temp file left


def test_an_unknown_type_is_refused_and_an_existing_copy_is_kept(tmp_path):
    with pytest.raises(ValueError, match="unknown type 'q3_x'"):
        requantize(tmp_path / "in.gguf", tmp_path / "out.gguf", "q3_x")
    done = tmp_path / "out.gguf"
    done.write_bytes(b"kept")
    assert requantize(tmp_path / "missing.gguf", done, "q4_0") == done and done.read_bytes() == b"kept"
