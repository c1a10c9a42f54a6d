"""Re-extraction for ``reingest``: the stored upload through the current text rules.

Documents ingested under older text rules keep working as they are (their text, page map and
snapshot agree with each other); re-ingesting one extracts its stored upload (``upload.bin``) again,
so the new rules apply, and records the rules version that made the new text.

Where that cannot be done, the stored text is kept, the document is prefilled again from it, and
the returned note says why:
* an encrypted PDF whose password was not sent again (passwords are never stored);
* an upload whose bytes are gone from the data directory;
* an upload that the current extractor refuses (its text from the older rules still works).
A document that is a part of its upload (``pages=``, ``chars=``, ingest/cut.py) is cut the same way.
A wrong password that *was* sent is the caller's error and raises WrongPassword (HTTP 422).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ingest.cut import Cut, apply
from ingest.errors import DocumentError, PasswordRequired, WrongPassword
from ingest.extract import ExtractedText

Extractor = Callable[[bytes, str | None], ExtractedText]
AsyncExtractor = Callable[[bytes, str | None], Awaitable[ExtractedText]]


def reextract(
    upload: bytes | None, stored: ExtractedText, extract: Extractor, password: str | None = None
) -> tuple[ExtractedText, str | None]:
    """Return ``(text, note)``: the upload extracted again with ``extract`` (note None), or the
    ``stored`` text with a note saying why it was kept. Raises WrongPassword."""
    if upload is None:
        return _gone(stored)
    try:
        fresh = extract(upload, password)
    except DocumentError as exc:
        return _kept(stored, exc)
    return _cut_again(fresh, stored)


async def reextract_async(
    upload: bytes | None, stored: ExtractedText, extract: AsyncExtractor, password: str | None = None
) -> tuple[ExtractedText, str | None]:
    """:func:`reextract` with a coroutine extractor (ingest/worker.py ``ExtractionWorker.extract_async``,
    which waits on the worker's own threads). ExtractorBusy (all workers and the queue taken) is
    raised, not kept as a note: the client retries. Raises WrongPassword."""
    from ingest.errors import ExtractorBusy

    if upload is None:
        return _gone(stored)
    try:
        fresh = await extract(upload, password)
    except ExtractorBusy:
        raise
    except DocumentError as exc:
        return _kept(stored, exc)
    return _cut_again(fresh, stored)


def _kept_note(stored: ExtractedText) -> str:
    return f"the stored text (text rules version {stored.rules}) was kept"


def _gone(stored: ExtractedText) -> tuple[ExtractedText, str]:
    return stored, f"the uploaded file is gone from the data directory; {_kept_note(stored)}"


def _kept(stored: ExtractedText, exc: DocumentError) -> tuple[ExtractedText, str]:
    if isinstance(exc, WrongPassword):
        raise exc
    if isinstance(exc, PasswordRequired):
        return stored, (
            f"the PDF is encrypted and its password is not stored; {_kept_note(stored)}. Send "
            '{"password": "..."} to extract it again with the current rules'
        )
    return stored, f"extracting the upload again failed ({exc}); {_kept_note(stored)}"


def _cut_again(fresh: ExtractedText, stored: ExtractedText) -> tuple[ExtractedText, str | None]:
    if stored.cut is None:
        return fresh, None
    try:  # a part of the upload: the same part again (a character range counts in the new text)
        return apply(fresh, Cut.from_spec(stored.cut)), None
    except DocumentError as exc:
        return stored, f"cutting {stored.cut} from the upload again failed ({exc}); {_kept_note(stored)}"
