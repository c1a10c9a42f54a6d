"""Snapshots: exact round trip, atomic write order, and refusal of a mismatching snapshot."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from ingest import snapshot
from testkit.harness import open_ctx


@pytest.fixture
def prefilled(gemma):
    ctx = open_ctx(gemma, n_ctx=1024)
    tokens = np.concatenate([[gemma.bos], gemma.tokenize("A short document about owls. " * 20, parse_special=False)])
    tokens = tokens.astype(np.int32)
    ctx.prefill(tokens, 0)
    logits = ctx.logits()[-1].copy()
    yield ctx, tokens, logits
    ctx.close()


def _next_logits(ctx, tokens):
    ctx.decode([int(tokens[-1])], len(tokens), outputs="all")
    return ctx.logits()[0].copy()


def test_round_trip_gives_identical_logits(prefilled, tmp_path):
    ctx, tokens, _ = prefilled
    meta = snapshot.save(ctx, 0, tokens, tmp_path)
    assert meta.n_tokens == len(tokens) and meta.tokens_sha256 == snapshot.tokens_sha256(tokens)
    expected = _next_logits(ctx, tokens)
    ctx.clear()
    snapshot.load(ctx, 0, tokens, tmp_path)
    assert ctx.pos_max(0) == len(tokens) - 1
    np.testing.assert_array_equal(_next_logits(ctx, tokens), expected)


def test_manifest_records_what_made_the_state(prefilled, tmp_path):
    ctx, tokens, _ = prefilled
    snapshot.save(ctx, 0, tokens, tmp_path)
    raw = json.loads((tmp_path / snapshot.META_FILE).read_text())
    for key in (
        "format_version",
        "llama_cpp_python",
        "model_fingerprint",
        "n_ctx",
        "type_k",
        "type_v",
        "flash_attn",
        "swa_full",
        "n_tokens",
        "tokens_sha256",
    ):
        assert key in raw
    assert not list(tmp_path.glob(".*tmp"))  # no temp files left behind


def test_state_without_manifest_is_no_snapshot(prefilled, tmp_path):
    ctx, tokens, _ = prefilled
    snapshot.save(ctx, 0, tokens, tmp_path)
    (tmp_path / snapshot.META_FILE).unlink()  # as if killed between the two renames
    with pytest.raises(snapshot.SnapshotMissing):
        snapshot.load(ctx, 0, tokens, tmp_path)


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("model_fingerprint", "other-model", "model_fingerprint"),
        ("type_k", "q8_0", "type_k"),
        ("llama_cpp_python", "0.0.1", "llama_cpp_python"),
        ("flash_attn", "on", "flash_attn"),
    ],
)
def test_mismatching_snapshot_is_refused(prefilled, tmp_path, field, value, words):
    ctx, tokens, _ = prefilled
    meta = snapshot.save(ctx, 0, tokens, tmp_path)
    bad = replace(meta, **{field: value})
    (tmp_path / snapshot.META_FILE).write_text(
        json.dumps(bad.__class__.__dict__ and {f: getattr(bad, f) for f in bad.__dataclass_fields__})
    )
    ctx.clear()
    with pytest.raises(snapshot.SnapshotIncompatible, match=words):
        snapshot.load(ctx, 0, tokens, tmp_path)
    assert ctx.pos_max(0) == -1  # nothing half-loaded


def test_other_prefix_tokens_are_refused(prefilled, tmp_path):
    ctx, tokens, _ = prefilled
    snapshot.save(ctx, 0, tokens, tmp_path)
    other = tokens.copy()
    other[5] += 1
    with pytest.raises(snapshot.SnapshotIncompatible, match="prefix token ids differ"):
        snapshot.load(ctx, 0, other, tmp_path)
