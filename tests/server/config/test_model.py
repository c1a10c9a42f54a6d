"""server/config/model.py: DOCQA_ANSWER_MODE=auto resolves per model as measured."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.config.settings import Settings


def test_auto_quotes_first_on_the_default_reader_only(tmp_path):
    assert Settings(data_dir=tmp_path).answer_mode_for_model() == "quote"  # qwen-coder-1.5b, the default
    assert Settings(data_dir=tmp_path, model="gemma-270m").answer_mode_for_model() == "direct"
    assert Settings(data_dir=tmp_path, model="qwen-coder-0.5b").answer_mode_for_model() == "direct"
    # A GGUF of the user's own: not measured, so direct, whatever DOCQA_MODEL names.
    own = Path(tmp_path / "own.gguf")
    assert Settings(data_dir=tmp_path, model_path=own).answer_mode_for_model() == "direct"
    assert Settings(data_dir=tmp_path, model="gemma-270m", answer_mode="quote").answer_mode_for_model() == "quote"


def test_the_two_draft_debug_settings_exclude_each_other(tmp_path):
    assert Settings(data_dir=tmp_path, debug_accept_drafts=True).debug_accept_drafts
    with pytest.raises(ValueError, match="exclude each other"):
        Settings(data_dir=tmp_path, debug_accept_drafts=True, debug_reject_drafts=True)
