"""Document snapshots: the prefilled sequence state on disk, with a manifest that says what made it.

Layout in a document's directory:
* ``state.bin``: ``llama_state_seq_save_file`` output (the prefix token ids plus the sequence's KV
  cells; llama.cpp's own format, which carries no model hash and is tied to the cache types and
  flash attention: the manifest says what made it).
* ``mtp.bin`` + ``mtp_h.npy`` (models drafting with their MTP head): the MTP context's KV for the
  prefix and the target hidden state of the last prefix token (the MTP's ``pending_h``), so a
  restored document drafts exactly as a fresh one does.
* ``state.json``: the manifest, :class:`SnapshotMeta`.

Write order makes a crash harmless: the state goes to a temp file, is fsynced and renamed; only then
is the manifest written the same way. A manifest therefore always describes a complete state file,
and a directory without one holds no snapshot. A failed save (a full disk) removes what it wrote.
The manifest's mtime is the snapshot's last use (:func:`touch`), for the disk budget's LRU eviction.

llama.cpp state files carry no model hash and depend on the KV cache types and flash attention
(``v_trans``), so the manifest records those and :func:`check` refuses a mismatch.

Integrity (issue 27): llama.cpp trusts its state files. A truncated one kills the process
(``GGML_ASSERT(nread <= state_size)``: its file reader returns short reads, llama.cpp issue 27052),
and one with bytes overwritten loads and answers garbage. So the manifest records each file's size
and XXH3-128 checksum (ingest/digest.py), and :func:`verify` checks them before any restore: the
size always, the checksum on the first restore of the file in a process and whenever its size or
mtime changed (bench/results/snapshot-integrity.md has the cost). A file that fails is never handed
to llama.cpp: :class:`SnapshotDamaged`. A state that passes and llama.cpp still refuses is
:class:`SnapshotRefused`. Both are SnapshotMissing, as is :class:`SnapshotStale` (only flash attention
differs: chosen anew at a start): the server prefills the document again from its
stored prefix, as for an evicted snapshot.

Manifests written before checksums (no ``files``) still load, unverified: their state is read into
memory and restored through llama.cpp's buffer reader (``llama_state_seq_set_data``), which checks
every read against the buffer's end, so a truncated legacy file is refused instead of killing the
process; a legacy file over :data:`LEGACY_MAX_BYTES` is not read (SnapshotDamaged: prefilled
again). After a legacy state loads, its manifest gains the files' sizes and checksums, so it is
verified from then on. Damage to a legacy file that keeps its size cannot be detected before that.
"""

from __future__ import annotations

import errno
import io
import json
import logging
import os
import shutil
import struct
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from ingest import side_state
from ingest.manifest import (
    FORMAT_VERSION,
    LEGACY_MAX_BYTES,
    META_FILE,
    MTP_FILE,
    MTP_H_FILE,
    STATE_FILE,
    SnapshotDamaged,
    SnapshotIncompatible,
    SnapshotMeta,
    SnapshotMissing,
    SnapshotRefused,
    SnapshotStale,
    check,
    read_meta,
    records,
    tokens_sha256,
    verify,
)
from runtime.atomic import fsync_dir, replacing, write_atomic
from runtime.llama import Context, LlamaError

# llama.cpp's seq state file header (llama-context.cpp, LLAMA_STATE_SEQ_MAGIC 'ggsq', version 3) and
# the in-memory header of llama_state_seq_get_data (its io magic, then the source seq id).
_FILE_MAGIC, _FILE_VERSION, _IO_MAGIC = 0x67677371, 3, 0xAF143CD8

__all__ = [
    "FORMAT_VERSION", "LEGACY_MAX_BYTES", "META_FILE", "MTP_FILE", "MTP_H_FILE", "STATE_FILE",
    "SnapshotDamaged", "SnapshotIncompatible", "SnapshotMeta", "SnapshotMissing", "SnapshotRefused", "SnapshotStale",
    "check", "describes", "least_recently_used", "load", "read_meta", "remove", "remove_all", "save",
    "tokens_sha256", "touch", "verify",
]  # fmt: skip

log = logging.getLogger("docqa.snapshot")


def save(
    ctx: Context,
    seq_id: int,
    tokens: np.ndarray,
    directory: Path,
    mtp: Context | None = None,
    mtp_h: np.ndarray | None = None,
) -> SnapshotMeta:
    """Write ``seq_id``'s state (which must hold exactly ``tokens``) and its manifest to ``directory``,
    which must exist (a deleted document's directory is never made again); with ``mtp``, also the MTP
    context's state for the same sequence and ``mtp_h`` [n_embd].

    Raises OSError (ENOSPC on a full disk) after removing what it wrote."""
    if not directory.is_dir():
        raise FileNotFoundError(errno.ENOENT, "the document's directory is gone (deleted)", str(directory))
    if mtp is not None and mtp_h is None:
        raise ValueError("an MTP snapshot needs the pending hidden state")
    meta = SnapshotMeta.for_context(ctx, tokens, mtp=mtp is not None)
    remove(directory)  # from here on the directory holds no snapshot
    try:
        _save_state(ctx, seq_id, tokens, directory / STATE_FILE)
        if mtp is not None:
            _save_state(mtp, seq_id, tokens, directory / MTP_FILE)
            buf = io.BytesIO()
            np.save(buf, np.asarray(mtp_h, dtype=np.float32))
            write_atomic(directory / MTP_H_FILE, buf.getvalue())
        meta = replace(meta, files=records(directory, meta))
        write_atomic(directory / META_FILE, json.dumps(asdict(meta), indent=1).encode())
        fsync_dir(directory)
    except BaseException:
        remove(directory)
        raise
    return meta


def _save_state(ctx: Context, seq_id: int, tokens: np.ndarray, path: Path) -> None:
    with replacing(path) as tmp:
        try:
            ctx.state_save_file(tmp, seq_id, tokens)
        except LlamaError as exc:  # llama.cpp says only that it failed: a full disk is the usual reason
            free, size = shutil.disk_usage(path.parent).free, ctx.state_size(seq_id)
            code = errno.ENOSPC if free < size else errno.EIO
            raise OSError(code, os.strerror(code), f"{tmp} ({free} bytes free, state {size} bytes)") from exc


def remove(directory: Path) -> int:
    """Remove the snapshot in ``directory`` (manifest first), keeping the document's other files.
    Returns the bytes freed."""
    freed = 0
    for name in (META_FILE, STATE_FILE, MTP_FILE, MTP_H_FILE):
        path = directory / name
        try:
            freed += path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            pass
    return freed + sum(side_state.remove(directory, name) for name in side_state.NAMES)


def touch(directory: Path) -> None:
    """Record a use of the snapshot (the manifest's mtime), for least-recently-used eviction."""
    try:
        os.utime(directory / META_FILE)
    except OSError:
        pass  # no snapshot (being rebuilt), or a read-only disk: nothing to record


def least_recently_used(docs_dir: Path) -> list[str]:
    """Ids of the documents under ``docs_dir`` that have a snapshot, least recently used first."""
    last: dict[str, float] = {}  # a segmented document's last use is its most recently used segment's
    for meta in [*docs_dir.glob(f"*/{META_FILE}"), *docs_dir.glob(f"*/segments/*/{META_FILE}")]:
        doc_id = meta.relative_to(docs_dir).parts[0]
        try:
            last[doc_id] = max(last.get(doc_id, 0.0), meta.stat().st_mtime)
        except FileNotFoundError:
            continue
    return [doc_id for doc_id, _ in sorted(last.items(), key=lambda item: item[1])]


def remove_all(directory: Path) -> int:
    """Remove the document's snapshot and those of its segments (``segments/<i>/``). Returns the
    bytes freed."""
    freed = remove(directory)
    segments = directory / "segments"
    if segments.is_dir():
        freed += sum(remove(d) for d in segments.iterdir() if d.is_dir())
    return freed


def describes(directory: Path, tokens: np.ndarray) -> bool:
    """True when ``directory`` holds a complete snapshot of exactly ``tokens``."""
    try:
        meta = read_meta(directory)
    except SnapshotMissing:
        return False
    return meta.n_tokens == len(tokens) and meta.tokens_sha256 == tokens_sha256(tokens)


def load(
    ctx: Context, seq_id: int, tokens: np.ndarray, directory: Path, mtp: Context | None = None
) -> np.ndarray | None:
    """Load the snapshot into ``seq_id`` after checking its files (:func:`verify`) and manifest
    (:func:`check`); verify tokens and positions. With ``mtp``, also load the MTP part into it and
    return the saved pending hidden state.

    Raises SnapshotMissing, SnapshotDamaged (a file failed its checks: llama.cpp never saw it),
    SnapshotRefused (llama.cpp refused a file that passed) or SnapshotIncompatible (another model,
    runtime or cache layout); on any failure ``seq_id`` is left empty.
    """
    meta = verify(directory)
    check(meta, ctx, tokens)
    if mtp is not None and not meta.mtp:
        raise SnapshotIncompatible("the snapshot was made without the MTP head, which this server drafts with")
    contexts = [(ctx, STATE_FILE)] + ([(mtp, MTP_FILE)] if mtp is not None else [])
    try:
        for c, name in contexts:
            if meta.files:
                stored = c.state_load_file(directory / name, seq_id, len(tokens))
            else:
                stored = _load_legacy(c, seq_id, directory / name, len(tokens))
            if not np.array_equal(stored, tokens) or c.pos_max(seq_id) != len(tokens) - 1:
                raise SnapshotDamaged(f"{name} does not hold the document's prefix tokens")
        mtp_h = _load_mtp_h(directory / MTP_H_FILE, ctx) if mtp is not None else None
    except Exception as exc:
        for c, _ in contexts:
            c.seq_rm(seq_id, 0)
        if isinstance(exc, SnapshotMissing | SnapshotIncompatible):
            raise
        raise SnapshotRefused(str(exc)) from exc
    if not meta.files:
        _upgrade(directory, meta)
    return mtp_h


def _load_mtp_h(path: Path, ctx: Context) -> np.ndarray:
    try:
        h = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise SnapshotDamaged(f"{path.name} could not be read ({exc})") from exc
    if h.dtype != np.float32 or h.ndim != 1 or not np.isfinite(h).all():
        raise SnapshotDamaged(f"{path.name} is not a finite float32 vector (dtype {h.dtype}, shape {h.shape})")
    return h


def _load_legacy(ctx: Context, seq_id: int, path: Path, capacity: int) -> np.ndarray:
    """Restore a state file without a checksum through llama.cpp's bounds-checked buffer reader
    (module docstring); returns the token ids stored with it."""
    size = path.stat().st_size
    if size > LEGACY_MAX_BYTES:
        raise SnapshotDamaged(
            f"{path.name} ({size} bytes) was saved before docqa recorded checksums and is too large to check by "
            f"loading it into memory (limit {LEGACY_MAX_BYTES} bytes)"
        )
    data = path.read_bytes()
    if len(data) < 12:
        raise SnapshotDamaged(f"{path.name} is {len(data)} bytes, shorter than its header")
    magic, version, n = struct.unpack_from("<III", data)
    if (magic, version) != (_FILE_MAGIC, _FILE_VERSION):
        raise SnapshotRefused(f"{path.name} has magic {magic:#x} version {version}, not a state file this build reads")
    if n > capacity or len(data) < 12 + 4 * n:
        raise SnapshotDamaged(f"{path.name} says it holds {n} tokens; the file or the document has fewer")
    stored = np.frombuffer(data, dtype=np.int32, count=n, offset=12).copy()
    body = memoryview(data)[12 + 4 * n :]
    ctx.state_set(struct.pack("<Ii", _IO_MAGIC, seq_id) + body, seq_id)
    return stored


def _upgrade(directory: Path, meta: SnapshotMeta) -> None:
    """Record the sizes and checksums of a legacy snapshot that just loaded, so it is verified from
    now on. A failure (a read-only disk) leaves it legacy."""
    try:
        upgraded = replace(meta, files=records(directory, meta))
        write_atomic(directory / META_FILE, json.dumps(asdict(upgraded), indent=1).encode())
    except OSError as exc:
        log.warning("could not record the checksums of the legacy snapshot in %s: %s", directory, exc)
