"""The engine's parts on the tiny qwen35 (tests/server/engine/parts.py), for the table tests."""

from __future__ import annotations

import pytest

from tests.server.engine.parts import Parts


@pytest.fixture
def parts(tmp_path, tiny_qwen35_path):
    parts = Parts(tmp_path / "data", tiny_qwen35_path)
    yield parts
    parts.close()
