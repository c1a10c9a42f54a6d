"""Typed ingest errors. Each message names the problem and what the user can do about it.

The server maps each class to one HTTP status in ``server/config/errors.py``.
"""

from __future__ import annotations


class DocumentError(Exception):
    """Base class: a user's document cannot be ingested as given."""


class EmptyDocument(DocumentError):
    """The upload has no bytes, or no text once normalised."""


class UnsupportedType(DocumentError):
    """The bytes are no format docqa reads (detected from the bytes, not the file name)."""


class PasswordRequired(DocumentError):
    """An encrypted PDF needs a password and none was sent."""


class WrongPassword(DocumentError):
    """An encrypted PDF did not open with the password that was sent."""


class UnreadableDocument(DocumentError):
    """The file could not be read: broken, truncated, or over a limit (decompression, time, memory)."""


class UnreadablePdf(UnreadableDocument):
    """pypdf could not parse the PDF (broken, truncated, or over a decompression limit)."""


class NoTextLayer(DocumentError):
    """A PDF whose pages carry no extractable text, e.g. a scan without OCR."""


class OcrUnavailable(NoTextLayer):
    """A PDF needs OCR (pages without a text layer) and the server cannot run it: Tesseract, or a
    language pack that DOCQA_OCR_LANGUAGES names, is not installed. The message says what to install."""


class DocumentTooLong(DocumentError):
    """The document prefix does not fit the context budget (n_ctx minus the answer reserve).

    ``n_tokens``: its length (``estimated`` when counting stopped past the limit, ingest/budget.py);
    ``fits``: the largest leading part that fits, ``{"pages": [first, last]}`` or ``{"chars": [start,
    end]}``, for an upload with ``pages=`` / ``chars=`` (None when not even a page fits); ``n_ctx`` and
    ``n_ctx_train`` (the model's trained context) decide whether a larger DOCQA_N_CTX is advice.
    """

    def __init__(
        self,
        n_tokens: int,
        limit: int,
        *,
        estimated: bool = False,
        fits: dict[str, list[int]] | None = None,
        n_ctx: int | None = None,
        n_ctx_train: int | None = None,
    ) -> None:
        self.n_tokens, self.limit, self.estimated, self.fits = n_tokens, limit, estimated, fits
        self.details = {"n_tokens": n_tokens, "limit": limit, "estimated": estimated, "fits": fits}
        size = (
            f"about {n_tokens} tokens (estimated; counting stopped past the limit)"
            if estimated
            else f"{n_tokens} tokens"
        )
        advice = []
        if fits:
            unit, (a, b) = next(iter(fits.items()))
            what = (
                f"pages {a}-{b}"
                if unit == "pages"
                else f"its first {b - a} characters"
                if not a
                else f"characters {a}-{b}"
            )
            advice.append(f"{what} fit: upload it again with {unit}={a}-{b}")
        advice.append("split the document")
        if n_ctx is None or not n_ctx_train:
            advice.append("start the server with a larger DOCQA_N_CTX")
        elif n_ctx < n_ctx_train:
            advice.append(f"start the server with a larger DOCQA_N_CTX (the model is trained for up to {n_ctx_train})")
        else:
            advice.append(
                f"serve a model with a longer context (DOCQA_N_CTX {n_ctx} already covers this model's trained "
                f"context of {n_ctx_train} tokens)"
            )
        super().__init__(
            f"document is {size}, limit is {limit} tokens (n_ctx minus the answer reserve); " + "; or ".join(advice)
        )


class ExtractorBusy(DocumentError):
    """Too many uploads are waiting to be read; ``headers`` tells the client when to try again."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.headers = {"Retry-After": str(retry_after)}


class DocumentFilesDamaged(Exception):
    """A stored file of a ready document is damaged (store/checked.py): ``file`` names it, ``reason``
    says what is wrong, ``action`` what fixes it. Not the upload's fault, and not a server fault:
    the server answers 409 with the action."""

    action = "re-ingest it with POST /v1/documents/{id}/reingest"

    def __init__(self, file: str, reason: str) -> None:
        super().__init__(f"the document's {file} is damaged: {reason}")
        self.file, self.reason = file, reason


class TextDamaged(DocumentFilesDamaged):
    """``text.json``: re-extract the stored upload (the server's repair path does when that gives the
    same text; reingest does)."""


class PrefixDamaged(DocumentFilesDamaged):
    """``prefix.npy`` (a document's or a segment's): rebuilt from the text with the tokenizer
    (store/repair.py ``repair_prefix``, by the server's repair path), else reingest."""


class SegmentsDamaged(DocumentFilesDamaged):
    """``segments.json``: made again from the text with the tokenizer and the budget when that gives
    every stored segment prefix (store/repair.py ``resplit``), else reingest."""


class IndexDamaged(DocumentFilesDamaged):
    """``segments.sqlite3`` is missing, unreadable or of an older version (rebuilt from the stored
    text and segment list, store/repair.py ``ensure_index``), or could not be rebuilt."""


class StorageError(Exception):
    """Base class: the data directory could not take a write. Not the user's document's fault."""

    headers: dict[str, str] = {}


class DiskFull(StorageError):
    """No room: a write hit ENOSPC or EDQUOT, or the free space (or DOCQA_DISK_BUDGET_BYTES) does not
    cover what a new document needs. The message has the numbers."""


class StoreBusy(StorageError):
    """The database stayed locked by another process for longer than the store waits."""

    headers = {"Retry-After": "5"}


class StorageFailed(StorageError):
    """Another OSError during a write (EIO, EROFS, ...); the server log has the path and the trace."""


class DataDirUnusable(StorageError):
    """The data directory is missing and cannot be created, read-only, or holds an unreadable database
    (a start-up error: the message names the path)."""
