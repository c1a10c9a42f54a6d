"""Documents whose saved state no longer fits the served context (issue 39 item 9).

A document is read at the context the server had then: its prefix (or each segment's) holds at most
``document_budget`` tokens (DOCQA_N_CTX less DOCQA_ANSWER_RESERVE). After ``DOCQA_N_CTX`` is lowered,
an older document's prefix can hold more than the new budget: it stayed ``ready``, and every question
about it got a 413 advising a shorter question, which no question can fix. At start-up
:func:`scan` finds such documents (one row read each, and a segmented document's segment list);
the engine keeps them in ``Engine.unfit`` (doc id -> the reason), the API shows the reason as the
document's ``needs_reingest``, and a question gets 409 ``needs_reingest`` (:func:`refuse`) that says
how to read it again: ``docqa reingest ID``, ``POST /v1/documents/{id}/reingest`` or the page's
Re-read button. A re-ingest lays the document out at the current size, in parts where it is longer
(DOCQA_LONG_DOCUMENTS=segment, the default). With ``DOCQA_REINGEST_UNFIT=true`` the server re-reads
them on its own after start-up, one after another (:func:`reingest_all`).

Documents read after the start are laid out at the current size, so only the start-up scan finds any.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from ingest.errors import DocumentFilesDamaged
from server.config.errors import NeedsReingest
from server.config.settings import Settings
from store.docstore import READY, DocRecord, DocStore

log = logging.getLogger("docqa.http")


def largest_prefix(store: DocStore, doc: DocRecord) -> int:
    """The most prefix tokens one piece of ``doc`` holds: its own, or its largest segment's."""
    try:
        segments = store.read_segments(doc.id)
    except DocumentFilesDamaged:  # its questions get the 409 that says so; nothing to tell here
        return 0
    return max((s.n_tokens for s in segments), default=0) if segments else doc.tokens


def reason(tokens: int, settings: Settings, segmented: bool) -> str:
    """Why a document read earlier cannot be asked now: "its saved state holds 6,534 tokens, more than
    the 3,072 a document may hold now (DOCQA_N_CTX=4096 less 1,024 kept for the answer)"."""
    what = "its largest part's saved state" if segmented else "its saved state"
    return (
        f"{what} holds {tokens:,} tokens, more than the {settings.document_budget:,} a document may hold now "
        f"(DOCQA_N_CTX={settings.n_ctx} less {settings.answer_reserve:,} kept for the answer)"
    )


def scan(store: DocStore, settings: Settings) -> dict[str, str]:
    """The ready documents whose prefix no longer fits the served context: doc id -> :func:`reason`.
    Sync (row and file reads): run it in a worker thread."""
    unfit: dict[str, str] = {}
    for doc in store.list():
        if doc.status != READY:
            continue
        tokens = largest_prefix(store, doc)
        if tokens > settings.document_budget:
            unfit[doc.id] = reason(tokens, settings, tokens != doc.tokens)
    if unfit:
        log.warning(
            "%d document(s) were read for a larger context than DOCQA_N_CTX=%d and must be read again "
            "(docqa reingest ID%s): %s",
            len(unfit),
            settings.n_ctx,
            "" if settings.reingest_unfit else ", or DOCQA_REINGEST_UNFIT=true",
            ", ".join(unfit),
        )
    return unfit


def refuse(doc_id: str, why: str) -> NeedsReingest:
    """The 409 a question about an unfit document gets: why, and how to read it again."""
    return NeedsReingest(
        f"document {doc_id} must be read again before it can be asked: {why}; read it again at this size "
        f"with `docqa reingest {doc_id}` (POST /v1/documents/{doc_id}/reingest) or the page's Re-read "
        "button: a document longer than that is read in parts"
    )


async def reingest_all(
    unfit: Callable[[], dict[str, str]], get: Callable[[str], Awaitable[DocRecord | None]], reingest: Callable
) -> None:
    """DOCQA_REINGEST_UNFIT: re-read each unfit document (``unfit()``: those marked now, by id), one
    after another (``get``: its row, off the loop; ``reingest(doc)``: the re-ingest route's pipeline).
    A failure is logged and the document stays marked, so its questions still say what to do."""
    for doc_id in list(unfit()):
        doc = await get(doc_id)
        if doc is None or doc_id not in unfit():
            continue
        try:
            await reingest(doc)
            log.info("%s: read again at this server's context (DOCQA_REINGEST_UNFIT)", doc_id)
        except Exception as exc:  # one document's failure must not stop the others
            log.warning("%s: could not be read again (%s: %s)", doc_id, type(exc).__name__, exc)
