"""reextract: when reingest extracts the upload again, and when it keeps the stored text (and says why)."""

from __future__ import annotations

import pytest

from ingest.errors import PasswordRequired, UnreadablePdf, WrongPassword
from ingest.extract import ExtractedText, extract
from ingest.reingest import reextract

STORED = ExtractedText("old\ntext", [0], "text", "utf-8", rules=1)
WRAPPED = b"The quick brown fox jumps over the lazy dog, and\nthen the story goes on with more words here.\n"


def _raise(exc: Exception):
    def extractor(data: bytes, password: str | None) -> ExtractedText:
        raise exc

    return extractor


def test_the_upload_is_extracted_with_the_current_rules():
    text, note = reextract(WRAPPED, STORED, lambda data, password: extract(data, password))
    assert note is None and text.rules == 2
    assert text.text == "The quick brown fox jumps over the lazy dog, and then the story goes on with more words here."


@pytest.mark.parametrize(
    ("upload", "extractor", "words"),
    [
        (None, _raise(AssertionError("never called")), "uploaded file is gone"),
        (b"%PDF-", _raise(PasswordRequired("needs a password")), "password is not stored"),
        (b"%PDF-", _raise(UnreadablePdf("broken")), "extracting the upload again failed (broken)"),
    ],
)
def test_the_stored_text_is_kept_with_a_note(upload, extractor, words):
    text, note = reextract(upload, STORED, extractor)
    assert text is STORED and words in note and "text rules version 1" in note


def test_a_wrong_password_is_the_callers_error():
    with pytest.raises(WrongPassword):
        reextract(b"%PDF-", STORED, _raise(WrongPassword("wrong")), password="nope")


def test_reextract_async_waits_on_the_workers_own_threads_and_keeps_the_same_rules():
    # Issue 27 item 12: reingest ran the sync extractor in asyncio's default pool.
    import asyncio

    from ingest.errors import ExtractorBusy
    from ingest.reingest import reextract_async
    from ingest.worker import ExtractionWorker

    worker = ExtractionWorker(timeout_s=60, memory_bytes=1024**3, workers=1, queue=0)

    async def run() -> None:
        text, note = await reextract_async(WRAPPED, STORED, worker.extract_async)
        assert note is None and text.rules == 2 and text.text.startswith("The quick brown fox")
        text, note = await reextract_async(b"\x89PNG\r\n", STORED, worker.extract_async)
        assert text is STORED and "extracting the upload again failed" in note
        with worker.slot():  # the one worker and no queue: taken
            with pytest.raises(ExtractorBusy):
                await reextract_async(WRAPPED, STORED, worker.extract_async)

    try:
        asyncio.run(run())
    finally:
        worker.close()
    with pytest.raises(WrongPassword):

        async def wrong(data, password):
            raise WrongPassword("wrong")

        asyncio.run(reextract_async(b"%PDF-", STORED, wrong, password="nope"))
