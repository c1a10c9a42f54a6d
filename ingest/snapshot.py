"""Document snapshots: the prefilled sequence state on disk, with a manifest that says what made it.

Layout in a document's directory:
* ``state.bin``: ``llama_state_seq_save_file`` output (the prefix token ids plus the sequence's KV
  cells; llama.cpp's own format, see notes §6).
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
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import shutil
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from runtime.atomic import fsync_dir, replacing, write_atomic
from runtime.llama import LLAMA_CPP_PYTHON_VERSION, Context, LlamaError

FORMAT_VERSION = 1
STATE_FILE = "state.bin"
MTP_FILE = "mtp.bin"
MTP_H_FILE = "mtp_h.npy"
META_FILE = "state.json"


class SnapshotMissing(Exception):
    """No complete snapshot in the directory."""


class SnapshotIncompatible(Exception):
    """The snapshot was made by another model, runtime or cache layout."""


def tokens_sha256(tokens: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(tokens, dtype=np.int32).tobytes()).hexdigest()


@dataclass(frozen=True, slots=True)
class SnapshotMeta:
    format_version: int
    llama_cpp_python: str
    model_fingerprint: str
    n_ctx: int
    type_k: str
    type_v: str
    flash_attn: str
    swa_full: bool
    n_tokens: int
    tokens_sha256: str
    mtp: bool = False  # holds the MTP context's part too

    @classmethod
    def for_context(cls, ctx: Context, tokens: np.ndarray, mtp: bool = False) -> SnapshotMeta:
        cfg = ctx.config
        return cls(
            format_version=FORMAT_VERSION,
            llama_cpp_python=LLAMA_CPP_PYTHON_VERSION,
            model_fingerprint=ctx.model.fingerprint,
            n_ctx=ctx.n_ctx,
            type_k=cfg.type_k,
            type_v=cfg.type_v,
            flash_attn=cfg.flash_attn,
            swa_full=cfg.swa_full,
            n_tokens=len(tokens),
            tokens_sha256=tokens_sha256(tokens),
            mtp=mtp,
        )

    # Fields that must match for the state to load and mean the same thing. n_ctx and swa_full only
    # size the cache; a state fits any context with enough cells.
    _MUST_MATCH = ("format_version", "llama_cpp_python", "model_fingerprint", "type_k", "type_v", "flash_attn")

    def mismatches(self, current: SnapshotMeta) -> list[str]:
        """Human-readable differences that make this snapshot unusable in ``current``'s context."""
        out = [
            f"{name}: snapshot {getattr(self, name)!r}, server {getattr(current, name)!r}"
            for name in self._MUST_MATCH
            if getattr(self, name) != getattr(current, name)
        ]
        if self.n_tokens > current.n_ctx:
            out.append(f"n_tokens: snapshot {self.n_tokens} > server n_ctx {current.n_ctx}")
        return out


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
    return freed


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


def read_meta(directory: Path) -> SnapshotMeta:
    """The manifest of a complete snapshot; raises SnapshotMissing when there is none."""
    path = directory / META_FILE
    if not path.is_file() or not (directory / STATE_FILE).is_file():
        raise SnapshotMissing(f"no snapshot in {directory}")
    try:
        raw = json.loads(path.read_text())
        return SnapshotMeta(**{f.name: raw[f.name] for f in fields(SnapshotMeta) if f.name in raw})
    except (ValueError, KeyError, TypeError) as exc:
        raise SnapshotMissing(f"unreadable snapshot manifest {path}: {exc}") from exc


def check(meta: SnapshotMeta, ctx: Context, tokens: np.ndarray) -> None:
    """Raise SnapshotIncompatible unless ``meta`` fits ``ctx`` and describes exactly ``tokens``."""
    current = SnapshotMeta.for_context(ctx, tokens)
    problems = meta.mismatches(current)
    if meta.n_tokens != current.n_tokens or meta.tokens_sha256 != current.tokens_sha256:
        problems.append("the prefix token ids differ (another tokenizer or prompt layout)")
    if problems:
        raise SnapshotIncompatible("; ".join(problems))


def load(
    ctx: Context, seq_id: int, tokens: np.ndarray, directory: Path, mtp: Context | None = None
) -> np.ndarray | None:
    """Load the snapshot into ``seq_id`` after checking its manifest; verify tokens and positions.
    With ``mtp``, also load the MTP part into it and return the saved pending hidden state.

    Raises SnapshotMissing or SnapshotIncompatible; on any failure ``seq_id`` is left empty.
    """
    meta = read_meta(directory)
    check(meta, ctx, tokens)
    if mtp is not None and not meta.mtp:
        raise SnapshotIncompatible("the snapshot was made without the MTP head, which this server drafts with")
    contexts = [(ctx, STATE_FILE)] + ([(mtp, MTP_FILE)] if mtp is not None else [])
    try:
        for c, name in contexts:
            stored = c.state_load_file(directory / name, seq_id, len(tokens))
            if not np.array_equal(stored, tokens) or c.pos_max(seq_id) != len(tokens) - 1:
                raise SnapshotIncompatible(f"{name} does not hold the document's prefix tokens")
        mtp_h = np.load(directory / MTP_H_FILE) if mtp is not None else None
    except Exception as exc:
        for c, _ in contexts:
            c.seq_rm(seq_id, 0)
        if isinstance(exc, SnapshotIncompatible):
            raise
        raise SnapshotIncompatible(f"llama.cpp refused the state file: {exc}") from exc
    return mtp_h
