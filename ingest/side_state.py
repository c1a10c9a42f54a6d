"""The state of a companion context (a separate draft model's: server/engine/draft_model.py) saved next
to a document's snapshot: ``<name>.bin`` (llama.cpp's sequence state file) and ``<name>.json`` (what
made it: the model's fingerprint and the prefix tokens' hash, and the state file's size and
checksum, ingest/digest.py).

It is a helper of the document's snapshot, never a requirement: a document whose side state is
missing, damaged or made by another model is answered without that drafter (the caller is told
why), so it is checked as the snapshot is (size always, checksum on the first load in a process and
whenever the file changed) and anything wrong is a reason string, not an error. It goes with the
snapshot: ingest/snapshot.py ``remove`` deletes it too (eviction, re-ingest).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ingest import digest
from ingest.manifest import tokens_sha256
from runtime.atomic import replacing, write_atomic
from runtime.llama import Context, LlamaError

#: The companions whose side states ingest/snapshot.py removes with a snapshot.
NAMES = ("draft",)


@dataclass(frozen=True, slots=True)
class SideMeta:
    model_fingerprint: str
    n_tokens: int
    tokens_sha256: str
    file: dict  # the state file's digest.FileRecord, as_json()


def files(directory: Path, name: str) -> tuple[Path, Path]:
    """(state file, manifest) of companion ``name`` in ``directory``."""
    return directory / f"{name}.bin", directory / f"{name}.json"


def save(ctx: Context, seq_id: int, tokens: np.ndarray, directory: Path, name: str) -> None:
    """Write ``seq_id``'s state of companion ``ctx`` (it holds exactly ``tokens``), manifest last.
    Raises OSError (a full disk) after removing what it wrote."""
    state, meta = files(directory, name)
    meta.unlink(missing_ok=True)
    try:
        with replacing(state) as tmp:
            ctx.state_save_file(tmp, seq_id, tokens)
        record = digest.record(state).as_json()
        side = SideMeta(ctx.model.fingerprint, len(tokens), tokens_sha256(tokens), record)
        write_atomic(meta, json.dumps(asdict(side)).encode())
    except LlamaError as exc:
        remove(directory, name)
        raise OSError(f"llama.cpp could not write the {name} state: {exc}") from exc
    except BaseException:
        remove(directory, name)
        raise


def load(ctx: Context, seq_id: int, tokens: np.ndarray, directory: Path, name: str) -> str | None:
    """Load companion ``name``'s state for ``tokens`` into ``seq_id`` of ``ctx``; None when it loaded,
    else why not (missing, made by another model or for other tokens, damaged, refused). ``seq_id``
    is left empty when it did not load."""
    state, meta_path = files(directory, name)
    try:
        side = SideMeta(**json.loads(meta_path.read_text()))
    except FileNotFoundError:
        return f"the document has no {name} state (ingested before the {name} model was set; re-ingest it)"
    except (OSError, ValueError, TypeError) as exc:
        return f"its {name} manifest is unreadable ({exc})"
    if side.model_fingerprint != ctx.model.fingerprint:
        return f"its {name} state was made by another {name} model (re-ingest it)"
    if side.n_tokens != len(tokens) or side.tokens_sha256 != tokens_sha256(tokens):
        return f"its {name} state is of another prefix (re-ingest it)"
    try:
        problem = digest.problem(state, digest.FileRecord.from_json(side.file))
    except (TypeError, ValueError) as exc:
        problem = f"its manifest's file record is unreadable ({exc})"
    if problem is not None:
        return f"its {name} state is damaged ({problem})"
    try:
        stored = ctx.state_load_file(state, seq_id, len(tokens))
        if not np.array_equal(stored, tokens) or ctx.pos_max(seq_id) != len(tokens) - 1:
            raise LlamaError("the state does not hold the prefix")
    except LlamaError as exc:
        ctx.seq_rm(seq_id, 0)
        return f"llama.cpp refused its {name} state ({exc})"
    return None


def remove(directory: Path, name: str) -> int:
    """Remove companion ``name``'s side state (manifest first); returns the bytes freed."""
    freed = 0
    for path in reversed(files(directory, name)):
        try:
            freed += path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            pass
    return freed
