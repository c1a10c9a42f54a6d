"""DOCQA_MODEL chooses an embedded model by name; DOCQA_MODEL_PATH still wins (server/engine/loading.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pydantic import ValidationError

from server.config.settings import Settings


def test_model_names_are_checked(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCQA_MODEL", "qwen-coder-1.5b")
    assert Settings(data_dir=tmp_path).model == "qwen-coder-1.5b"
    monkeypatch.setenv("DOCQA_MODEL", "qwen-9b")
    with pytest.raises(ValidationError, match="gemma-270m"):
        Settings(data_dir=tmp_path)


def test_a_missing_embedded_model_is_a_load_error_naming_the_fix(monkeypatch, tmp_path):
    """An embedded model whose parts are not installed: LoadError with the requirements file."""
    from runtime import models
    from server.engine import loading

    missing = replace(models.QWEN_0_5B, parts=(models.Part("docqa-no-such-part1", 1, "0" * 64),))
    monkeypatch.setitem(models.CATALOGUE, "qwen-coder-0.5b", missing)
    with pytest.raises(loading.LoadError, match="docqa-no-such-part1.*requirements/qwen-coder-0.5b.txt"):
        loading.load(Settings(data_dir=tmp_path, model="qwen-coder-0.5b"), doc_seq=0)


def test_model_path_wins(tmp_path, gemma_path):
    s = Settings(data_dir=tmp_path, model="qwen-coder-1.5b", model_path=gemma_path)
    assert s.model_path == gemma_path  # loading.load uses it and never assembles the named model
