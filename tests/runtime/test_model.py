"""runtime/model.py on the real embedded model and SmolLM2."""

from __future__ import annotations

import pytest

from runtime.llama import Model
from runtime.model import _MAX_TOKEN_CHARS


@pytest.mark.parametrize("which", ["gemma_path", "smollm_path"])
def test_max_token_chars_is_the_longest_piece_of_the_whole_vocabulary(which, request):
    """The fast bound (byte lengths, then decoding only the candidates) equals decoding every token."""
    model = Model(request.getfixturevalue(which))
    _MAX_TOKEN_CHARS.pop(model.fingerprint, None)  # computed here, not remembered from another test
    try:
        every = max(len(model.piece(t).decode("utf-8", errors="replace")) for t in range(model.n_vocab))
        assert model.max_token_chars == every > 8
    finally:
        model.close()


def test_a_released_model_is_taken_again_by_the_same_load_and_freed_when_another_is_kept(
    gemma_path, smollm_path, tmp_path
):
    """runtime/model.py ``acquire``/``release``: a server started again in the same process takes the
    model its predecessor released instead of loading it again; other parameters or another file load
    anew, and only the most recent idle model stays loaded."""
    from runtime.model import acquire, release

    first = acquire(gemma_path, n_gpu_layers=0)
    second = acquire(gemma_path, n_gpu_layers=0)
    assert second is not first  # held: a second caller loads its own
    second.close()
    release(first)
    again = acquire(gemma_path, n_gpu_layers=0)
    assert again is first and again.ptr
    plain = acquire(gemma_path, n_gpu_layers=0, extra_bufts=False)
    assert plain is not first  # other parameters
    plain.close()
    release(again)
    other = acquire(smollm_path, n_gpu_layers=0)
    release(other)  # kept; the Gemma released before it is freed
    assert not first.ptr and acquire(smollm_path, n_gpu_layers=0) is other
    release(other)
