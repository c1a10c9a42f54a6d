"""A snapshot's manifest (``state.json``): what made the state (model, runtime, cache layout,
prefix tokens) and each state file's size and checksum; and the checks made before a restore.
ingest/snapshot.py writes and loads snapshots and re-exports these names; its docstring says why
each check is there.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from ingest import digest
from runtime.llama import LLAMA_CPP_PYTHON_VERSION, Context

FORMAT_VERSION = 1
STATE_FILE = "state.bin"
MTP_FILE = "mtp.bin"
MTP_H_FILE = "mtp_h.npy"
META_FILE = "state.json"
LEGACY_MAX_BYTES = 4 * 1024**3  # a legacy state read into memory to load it (ingest/snapshot.py)


class SnapshotMissing(Exception):
    """No complete snapshot in the directory."""


class SnapshotDamaged(SnapshotMissing):
    """A snapshot file is not the one its manifest describes (missing, truncated, changed, replaced)
    or could not be read; ``reason`` says which file and how. It was not handed to llama.cpp."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"the saved state is damaged: {reason}")
        self.reason = reason


class SnapshotRefused(SnapshotMissing):
    """llama.cpp refused a state file that passed the checks (or a legacy one without checksums);
    ``reason`` is what it said."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"llama.cpp refused the saved state: {reason}")
        self.reason = reason


class SnapshotIncompatible(Exception):
    """The snapshot was made by another model, runtime or cache layout."""


class SnapshotStale(SnapshotMissing):
    """The snapshot holds this model's state of exactly these tokens, made with flash attention set
    otherwise (llama.cpp keeps V transposed without it, so the state does not load): the document is
    prefilled again from its stored prefix, as for a missing snapshot, not refused. Flash attention is
    chosen by a measurement at the first start (server/engine/layout.py), not by the user, so a
    snapshot made before that choice must not cost a re-ingest; ``reason`` says what differs."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"the saved state was made with another attention layout: {reason}")
        self.reason = reason


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
    # {file name: {"bytes": n, "xxh3_128": hex}} of state.bin (and mtp.bin, mtp_h.npy); {}: legacy
    files: dict[str, dict] = field(default_factory=dict)

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

    def differing(self, current: SnapshotMeta) -> list[str]:
        """The fields of :data:`_MUST_MATCH` that differ from ``current``'s. Flash attention ``auto`` is
        taken as ``on``: it is on wherever llama.cpp can (its CPU and CUDA backends), and where it is not,
        llama.cpp refuses the state itself (V transposed otherwise): SnapshotRefused, prefilled again."""

        def value(meta: SnapshotMeta, name: str) -> object:
            v = getattr(meta, name)
            return "on" if name == "flash_attn" and v == "auto" else v

        return [name for name in self._MUST_MATCH if value(self, name) != value(current, name)]

    def mismatches(self, current: SnapshotMeta) -> list[str]:
        """Human-readable differences that make this snapshot unusable in ``current``'s context."""
        out = [
            f"{name}: snapshot {getattr(self, name)!r}, server {getattr(current, name)!r}"
            for name in self.differing(current)
        ]
        if self.n_tokens > current.n_ctx:
            out.append(f"n_tokens: snapshot {self.n_tokens} > server n_ctx {current.n_ctx}")
        return out


def names(meta: SnapshotMeta) -> tuple[str, ...]:
    """The state files a snapshot made as ``meta`` says has."""
    return (STATE_FILE, MTP_FILE, MTP_H_FILE) if meta.mtp else (STATE_FILE,)


def records(directory: Path, meta: SnapshotMeta) -> dict[str, dict]:
    """The ``files`` entry of ``meta``'s manifest for the files in ``directory`` as they are now."""
    return {name: digest.record(directory / name).as_json() for name in names(meta)}


def read_meta(directory: Path) -> SnapshotMeta:
    """The manifest of a complete snapshot; raises SnapshotMissing when there is none."""
    path = directory / META_FILE
    if not path.is_file() or not (directory / STATE_FILE).is_file():
        raise SnapshotMissing(f"no snapshot in {directory}")
    try:
        raw = json.loads(path.read_text())
        meta = SnapshotMeta(**{f.name: raw[f.name] for f in fields(SnapshotMeta) if f.name in raw})
        for record in meta.files.values():
            digest.FileRecord.from_json(record)
        return meta
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise SnapshotMissing(f"unreadable snapshot manifest {path}: {exc}") from exc


def verify(directory: Path) -> SnapshotMeta:
    """The manifest, after checking that every file it records is the one it describes (size
    always, checksum as the module docstring says). Raises SnapshotMissing (no snapshot, an
    unreadable manifest) or SnapshotDamaged (which file, and how). A legacy manifest (no ``files``)
    is returned unchecked. Cheap after the first call for the same unchanged files."""
    meta = read_meta(directory)
    if not meta.files:
        return meta
    for name in names(meta):
        raw = meta.files.get(name)
        if raw is None:
            raise SnapshotDamaged(f"its manifest does not record {name}")
        reason = digest.problem(directory / name, digest.FileRecord.from_json(raw))
        if reason is not None:
            raise SnapshotDamaged(reason)
    return meta


def check(meta: SnapshotMeta, ctx: Context, tokens: np.ndarray) -> None:
    """Raise SnapshotIncompatible unless ``meta`` fits ``ctx`` and describes exactly ``tokens``;
    SnapshotStale when only flash attention differs."""
    current = SnapshotMeta.for_context(ctx, tokens)
    problems = meta.mismatches(current)
    if meta.n_tokens != current.n_tokens or meta.tokens_sha256 != current.tokens_sha256:
        problems.append("the prefix token ids differ (another tokenizer or prompt layout)")
    if meta.differing(current) == ["flash_attn"] and len(problems) == 1:  # and the same tokens, fitting
        raise SnapshotStale(problems[0])
    if problems:
        raise SnapshotIncompatible("; ".join(problems))
