"""Snapshots: exact round trip, atomic write order, refusal of a mismatching snapshot, and of a damaged one
before llama.cpp sees it (issue 27)."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import numpy as np
import pytest

from ingest import digest, snapshot
from testkit.harness import open_ctx
from tests.ingest import damage


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


def test_a_snapshot_made_with_flash_attention_set_otherwise_is_stale_not_refused(prefilled, tmp_path):
    """Flash attention is chosen at the first start (server/engine/layout.py): a document saved before the
    choice is prefilled again from its prefix (a SnapshotMissing), never refused with a re-ingest to do."""
    ctx, tokens, _ = prefilled
    meta = snapshot.save(ctx, 0, tokens, tmp_path)
    other = replace(meta, flash_attn="off" if meta.flash_attn != "off" else "on")
    (tmp_path / snapshot.META_FILE).write_text(json.dumps({f: getattr(other, f) for f in other.__dataclass_fields__}))
    ctx.clear()
    with pytest.raises(snapshot.SnapshotStale, match="flash_attn") as caught:
        snapshot.load(ctx, 0, tokens, tmp_path)
    assert isinstance(caught.value, snapshot.SnapshotMissing) and ctx.pos_max(0) == -1
    same = replace(meta, flash_attn={"auto": "on", "on": "auto"}.get(meta.flash_attn, meta.flash_attn))
    (tmp_path / snapshot.META_FILE).write_text(json.dumps({f: getattr(same, f) for f in same.__dataclass_fields__}))
    snapshot.load(ctx, 0, tokens, tmp_path)  # auto is on where llama.cpp can: the same state
    ctx.clear()
    both = replace(other, type_k="q8_0")  # and another cache type: refused as before
    (tmp_path / snapshot.META_FILE).write_text(json.dumps({f: getattr(both, f) for f in both.__dataclass_fields__}))
    with pytest.raises(snapshot.SnapshotIncompatible, match="type_k"):
        snapshot.load(ctx, 0, tokens, tmp_path)


def test_other_prefix_tokens_are_refused(prefilled, tmp_path):
    ctx, tokens, _ = prefilled
    snapshot.save(ctx, 0, tokens, tmp_path)
    other = tokens.copy()
    other[5] += 1
    with pytest.raises(snapshot.SnapshotIncompatible, match="prefix token ids differ"):
        snapshot.load(ctx, 0, other, tmp_path)


# -- integrity (issue 27 item 1) ------------------------------------------------------------------


def _watch_llama(monkeypatch, ctx) -> list:
    """Record every state file handed to llama.cpp (by path or as bytes)."""
    seen: list = []
    load_file, state_set = ctx.state_load_file, ctx.state_set
    monkeypatch.setattr(ctx, "state_load_file", lambda path, *a: seen.append(path) or load_file(path, *a))
    monkeypatch.setattr(ctx, "state_set", lambda data, *a: seen.append(len(data)) or state_set(data, *a))
    return seen


@pytest.mark.parametrize("how", [damage.truncate, damage.overwrite], ids=["truncated", "4 KiB overwritten"])
def test_a_damaged_state_is_refused_before_llama_sees_it(prefilled, tmp_path, monkeypatch, how):
    ctx, tokens, _ = prefilled
    snapshot.save(ctx, 0, tokens, tmp_path)
    expected = _next_logits(ctx, tokens)
    how(tmp_path / snapshot.STATE_FILE)
    ctx.clear()
    seen = _watch_llama(monkeypatch, ctx)
    with pytest.raises(snapshot.SnapshotDamaged) as refused:
        snapshot.load(ctx, 0, tokens, tmp_path)
    assert isinstance(refused.value, snapshot.SnapshotMissing), "the server prefills it again, as when evicted"
    assert "state.bin" in refused.value.reason and seen == [] and ctx.pos_max(0) == -1
    # The document's next snapshot is good again, and restores to the same logits.
    ctx.prefill(tokens, 0)
    snapshot.save(ctx, 0, tokens, tmp_path)
    ctx.clear()
    snapshot.load(ctx, 0, tokens, tmp_path)
    np.testing.assert_array_equal(_next_logits(ctx, tokens), expected)


def test_damage_that_keeps_size_and_mtime_is_found_after_a_restart(prefilled, tmp_path, monkeypatch):
    # A copy that preserves mtimes (rsync -t, cp -p) of a damaged file: the first restore after a
    # start hashes whatever the mtime says.
    ctx, tokens, _ = prefilled
    snapshot.save(ctx, 0, tokens, tmp_path)
    state = tmp_path / snapshot.STATE_FILE
    damage.overwrite(state, 256, keep_mtime=True)
    digest.forget()  # a new process remembers nothing
    ctx.clear()
    seen = _watch_llama(monkeypatch, ctx)
    with pytest.raises(snapshot.SnapshotDamaged, match="checksum"):
        snapshot.load(ctx, 0, tokens, tmp_path)
    assert seen == []


def test_another_documents_state_in_its_place_is_refused(gemma, prefilled, tmp_path, monkeypatch):
    ctx, tokens, _ = prefilled
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    mine.mkdir()
    theirs.mkdir()
    snapshot.save(ctx, 0, tokens, mine)
    other = np.concatenate([[gemma.bos], gemma.tokenize("Notes on the migration of geese. " * 20, parse_special=False)])
    ctx.clear()
    ctx.prefill(other.astype(np.int32), 0)
    snapshot.save(ctx, 0, other.astype(np.int32), theirs)
    damage.replace_with(mine / snapshot.STATE_FILE, theirs / snapshot.STATE_FILE)
    ctx.clear()
    seen = _watch_llama(monkeypatch, ctx)
    with pytest.raises(snapshot.SnapshotDamaged, match="state.bin"):
        snapshot.load(ctx, 0, tokens, mine)
    assert seen == []


def test_checksums_are_recorded_and_checked_once_per_process(prefilled, tmp_path, monkeypatch):
    ctx, tokens, _ = prefilled
    meta = snapshot.save(ctx, 0, tokens, tmp_path)
    state = tmp_path / snapshot.STATE_FILE
    assert meta.files == {"state.bin": {"bytes": state.stat().st_size, "xxh3_128": digest.file_digest(state)}}
    assert json.loads((tmp_path / snapshot.META_FILE).read_text())["files"] == meta.files
    digest.forget()
    hashed: list = []
    real = digest.file_digest
    monkeypatch.setattr(digest, "file_digest", lambda p: hashed.append(p) or real(p))
    snapshot.verify(tmp_path)
    snapshot.verify(tmp_path)
    assert hashed == [state], "hashed on the first check after a start, not on the second"
    os.utime(state)  # a new mtime: hashed again
    snapshot.verify(tmp_path)
    assert len(hashed) == 2


def _legacy(directory):
    """The manifest as docqa wrote it before checksums."""
    raw = json.loads((directory / snapshot.META_FILE).read_text())
    del raw["files"]
    (directory / snapshot.META_FILE).write_text(json.dumps(raw))


def test_a_legacy_manifest_loads_and_gains_checksums(prefilled, tmp_path):
    ctx, tokens, _ = prefilled
    snapshot.save(ctx, 0, tokens, tmp_path)
    expected = _next_logits(ctx, tokens)
    _legacy(tmp_path)
    ctx.clear()
    snapshot.load(ctx, 0, tokens, tmp_path)
    np.testing.assert_array_equal(_next_logits(ctx, tokens), expected)
    assert snapshot.read_meta(tmp_path).files["state.bin"]["bytes"] == (tmp_path / snapshot.STATE_FILE).stat().st_size


def test_a_truncated_legacy_state_is_refused_not_a_crash(prefilled, tmp_path):
    # Without a size to check, the state goes through llama.cpp's bounds-checked buffer reader: a
    # short file is refused there instead of GGML_ASSERT killing the process (file reader).
    ctx, tokens, _ = prefilled
    snapshot.save(ctx, 0, tokens, tmp_path)
    _legacy(tmp_path)
    damage.truncate(tmp_path / snapshot.STATE_FILE)
    ctx.clear()
    with pytest.raises(snapshot.SnapshotRefused) as refused:
        snapshot.load(ctx, 0, tokens, tmp_path)
    assert isinstance(refused.value, snapshot.SnapshotMissing) and ctx.pos_max(0) == -1
    assert "files" not in json.loads((tmp_path / snapshot.META_FILE).read_text()), "not blessed"


def test_a_bad_files_record_is_an_unreadable_manifest(prefilled, tmp_path):
    ctx, tokens, _ = prefilled
    snapshot.save(ctx, 0, tokens, tmp_path)
    raw = json.loads((tmp_path / snapshot.META_FILE).read_text())
    raw["files"]["state.bin"]["bytes"] = "many"
    (tmp_path / snapshot.META_FILE).write_text(json.dumps(raw))
    with pytest.raises(snapshot.SnapshotMissing, match="unreadable snapshot manifest"):
        snapshot.verify(tmp_path)


def test_mtp_files_are_checked_too(tiny_qwen35_path, tmp_path):
    from runtime.llama import Model
    from testkit.harness import TinyMtp

    model = Model(tiny_qwen35_path, load_mtp=True)
    tiny = TinyMtp(model)
    try:
        prefix = model.tokenize("the cat sat on the mat and the dog ran", parse_special=False)
        tiny.start(prefix)
        meta = snapshot.save(tiny.t, 0, prefix, tmp_path, tiny.d, tiny.mtp.pending_h)
        assert set(meta.files) == {"state.bin", "mtp.bin", "mtp_h.npy"}
        for name in ("mtp.bin", "mtp_h.npy"):
            good = (tmp_path / name).read_bytes()
            damage.truncate(tmp_path / name)
            tiny.t.clear()
            tiny.d.clear()
            with pytest.raises(snapshot.SnapshotDamaged, match=name):
                snapshot.load(tiny.t, 0, prefix, tmp_path, tiny.d)
            (tmp_path / name).write_bytes(good)
        h = snapshot.load(tiny.t, 0, prefix, tmp_path, tiny.d)
        np.testing.assert_array_equal(h, tiny.mtp.pending_h)
        _legacy(tmp_path)  # a legacy MTP snapshot: both states through the buffer reader
        tiny.t.clear()
        tiny.d.clear()
        np.testing.assert_array_equal(snapshot.load(tiny.t, 0, prefix, tmp_path, tiny.d), h)
        assert set(snapshot.read_meta(tmp_path).files) == {"state.bin", "mtp.bin", "mtp_h.npy"}
    finally:
        tiny.close()
        model.close()
