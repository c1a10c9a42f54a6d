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
