"""What the engine loads at start (server/engine/loading.py): here, DOCQA_BATCH_INVARIANT's kernel choice."""

from __future__ import annotations

import logging
import os

from runtime.llama import Model
from runtime.numerics import TILED_ENV
from spec.limits import INVARIANT_MAX_ROWS
from testkit.harness import open_ctx
from testkit.live import Live
from tests.conftest import upload


def test_batch_invariant_falls_back_to_the_row_cap_when_the_kernel_switch_comes_too_late(
    server, gemma_path, cases, caplog, monkeypatch
):
    """ggml latches GGML_CPU_TILED_MM at the first matmul of a process. This process multiplies with
    the tiled kernel on first; a batch-invariant server loaded after it cannot have the per-row
    kernels, finds so in its start-up probe, warns, and keeps every decode call at 7 rows (window 6)
    instead; the variable is given back as it was. (tests/server/engine/test_batching.py has the mode
    with the per-row kernels, in a process of its own.)"""
    monkeypatch.setenv(TILED_ENV, "1")
    model = Model(gemma_path, extra_bufts=False)
    ctx = open_ctx(model, n_ctx=256)
    ctx.decode([max(model.bos, 0)] * 8, 0, outputs="all")
    ctx.close()
    model.close()
    with caplog.at_level(logging.WARNING, logger="docqa"), server(batch_invariant=True) as client:
        engine = client.app.state.services.engine
        assert engine.runner.max_rows == INVARIANT_MAX_ROWS
        assert engine.loaded.max_window == INVARIANT_MAX_ROWS - 1
        doc = upload(client, cases / "pdf/pypdf-resources/crazyones.pdf")
        body = {"question": "Quote the whole text of the document verbatim.", "max_tokens": 24, "draft_tokens": 16}
        r = client.post(f"/v1/documents/{doc['id']}/answers", json=body)
        assert r.status_code == 200 and r.json()["stats"]["completion_tokens"] == 24, r.text
    assert any("decode calls are capped" in r.getMessage() for r in caplog.records)
    assert os.environ[TILED_ENV] == "1"


def test_batch_invariant_takes_the_per_row_kernels_in_a_fresh_process(tmp_path, gemma_path):
    """A server process started with DOCQA_BATCH_INVARIANT sets the switch before its first decode, its
    probe finds every row count alike, and it keeps the full draft window of 16."""
    server = Live(tmp_path / "data", gemma_path, DOCQA_BATCH_INVARIANT="true").start()
    server.stop()
    log = server.log.read_text()
    assert "max window 16" in log and "decode calls are capped" not in log, log[-3000:]
