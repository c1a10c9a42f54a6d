"""Typed ingest errors. Each message names the problem and what the user can do about it.

The server maps each class to one HTTP status in ``server/errors.py``.
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


class DocumentTooLong(DocumentError):
    """The document prefix does not fit the context budget (n_ctx minus the answer reserve)."""

    def __init__(self, n_tokens: int, limit: int) -> None:
        self.n_tokens = n_tokens
        self.limit = limit
        super().__init__(
            f"document is {n_tokens} tokens, limit is {limit} tokens (n_ctx minus the answer reserve); "
            "split the document, or start the server with a larger DOCQA_N_CTX"
        )


class ExtractorBusy(DocumentError):
    """Too many uploads are waiting to be read; ``headers`` tells the client when to try again."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.headers = {"Retry-After": str(retry_after)}
