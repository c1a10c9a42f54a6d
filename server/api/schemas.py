"""Request and response bodies of the HTTP API."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from spec.limits import MAX_WINDOW
from spec.quote import REFUSALS
from spec.sources import NAMES

#: Which drafters may fill the draft window: all of them ("all"; "both" is its older name, from when
#: there were two) or one, by its name in the registry (spec/sources.py).
DraftSource = Literal[("all", "both", *NAMES)]
#: How an answer is written: ``quote``, the passage of the document that answers first (verified
#: against the document, spec/quote.py), then the answer; ``direct``, the answer alone.
AnswerMode = Literal["quote", "direct"]
#: Why a quote-first answer was refused, as a word (spec/quote.py REFUSALS).
Refusal = Literal[REFUSALS]
#: Longest question, in characters (both question routes).
MAX_QUESTION_CHARS = 20_000
#: Longest conversation (every message together), in characters, on the chat route.
MAX_CONVERSATION_CHARS = 100_000
#: Largest max_tokens a request may ask for (both question routes).
MAX_ANSWER_TOKENS = 32_768
#: Most documents in one collection, and the longest collection name (characters).
MAX_COLLECTION_DOCUMENTS = 100
MAX_COLLECTION_NAME = 200


def _finite(value: Any) -> Any:
    """Refuse NaN and infinities by name, before the range check (a NaN temperature was reported as
    "should be less than or equal to 5"; JSON parsers here accept ``NaN`` and ``Infinity``)."""
    try:
        number = float(value) if isinstance(value, int | float | str) else None
    except ValueError:
        return value  # not a number at all: the float validation says so
    if number is not None and not math.isfinite(number):
        what = "NaN" if math.isnan(number) else f"{'-' if number < 0 else ''}infinity"
        raise PydanticCustomError("finite_number", "Input should be a finite number, not {what}", {"what": what})
    return value


#: A float field that names NaN and infinities as what they are.
Finite = Annotated[float, BeforeValidator(_finite)]


class Body(BaseModel):
    """A request body whose optional fields take JSON ``null`` as "not sent": OpenAI clients and proxies
    send nulls for the fields a caller left unset (llama.cpp issue 25515), so a null for a field with a
    default is dropped before validation and the default applies. A null for a required field is
    still refused (422 naming it)."""

    @model_validator(mode="before")
    @classmethod
    def _nulls_are_unset(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        fields = cls.model_fields
        return {k: v for k, v in data.items() if v is not None or (k in fields and fields[k].is_required())}


class PageWarning(BaseModel):
    """A page of a document that could not be read well; the rest of the document was."""

    page: int  # 1-based
    message: str


class SegmentPublic(BaseModel):
    """A segment of a document longer than the context: prefilled and snapshotted on its own."""

    index: int  # 0-based
    pages: list[int]  # [first, last], as printed
    start: int  # character offsets into the document text, [start, end); neighbours overlap a little
    end: int
    tokens: int  # its prefix tokens
    part: int | None = None  # index + 1
    parts: int | None = None  # how many segments the document has
    label: str | None = None  # "pages 5–9", or in a text without pages "part 2 of 3, characters 0–31,204"


class ReadingPublic(BaseModel):
    """A document being read (prefilled), as its reader waits for it (server/engine/reading.py). The
    reading queue reads the document with the fewest tokens left first (server/engine/scheduler.py)."""

    waiting: bool  # not being read now: its turn has not come (questions or other readings go first), or paused
    paused: bool = False  # its reading began and was set aside for a shorter document's; it keeps its progress
    ahead: int  # questions being answered now, which go before a reading that waits
    position: int = 1  # its place in the reading queue: 1 = being read now (or next), 2 = read after one other
    documents_ahead: int  # documents expected to be read before it (position - 1; one is read at a time)
    tokens_done: int  # prefix tokens read (every segment's, for a long document)
    tokens_total: int
    tokens_per_s: float | None  # its reading rate (waiting: the server's), over the last 30 s; null until measured
    seconds_to_start: float | None = None  # expected seconds until its reading begins or goes on (0: being read)
    seconds_left: float | None  # expected seconds until it is ready: the tokens before it and its own, at that rate
    busy: str | None = None  # "load average 8.2 on 2 cores": the machine is busy, so reading is slow


class DocumentPublic(BaseModel):
    """A document as the API shows it."""

    id: str
    name: str
    status: str  # ingesting | ready | failed
    progress: float  # prefill progress 0..1
    reading: ReadingPublic | None = None  # while ingesting: waiting or read so far, the rate, the time left
    # Why it must be read again before it can be asked (its saved state no longer fits the served
    # context: DOCQA_N_CTX was lowered since; server/service/refit.py); null: it need not be.
    needs_reingest: str | None = None
    pages: int
    tokens: int
    error: str | None
    created_at: float
    kind: str  # pdf | docx | ... (GET /v1/formats, ingest/formats.py); "": a refused file
    text_rules: int  # the text rules version that made the stored text (1 = raw lines; see reingest)
    encoding: str | None  # text and HTML uploads: the codec their bytes were decoded with
    warnings: list[PageWarning] = []  # pages that could not be read, or read as garbage
    segments: list[SegmentPublic] | None = None  # a document longer than the context: its segments
    source_path: str | None = None  # the watched file it was read from (DOCQA_WATCH); None: uploaded
    read_at: float | None = None  # unix seconds: when that file was last read
    # Its watched folder is unavailable (gone, unreadable, or empty where its files were), and why: the
    # document is kept as it was and still answers; null: the folder is there, or it was uploaded.
    folder_unavailable: str | None = None


class DocumentCreated(BaseModel):
    """Answer to an upload (202 new, 200 already known) or a re-ingest."""

    id: str
    name: str
    status: str
    note: str | None = None  # re-ingest: why the stored text was kept instead of extracted again


class ReingestRequest(Body):
    """Optional body of a re-ingest: an encrypted PDF's password (passwords are never stored)."""

    password: str | None = Field(default=None, max_length=1024)


class DocumentList(BaseModel):
    documents: list[DocumentPublic]


class FormatPublic(BaseModel):
    kind: str  # a document's kind when its bytes are this format
    label: str  # its name for people ("Word")
    suffixes: list[str]  # file name endings (".docx"); a watched folder reads these, an upload is told by its bytes
    media_type: str  # what GET /v1/documents/{id}/file serves it as


class FormatList(BaseModel):
    formats: list[FormatPublic]  # in the order the bytes are tried against them
    accepted: str  # the sentence a refusal ends with ("upload a PDF, Word, ... or text file (.pdf ...)")


class PageSpan(BaseModel):
    page: int  # 1-based
    start: int  # character offsets into `text`, [start, end)
    end: int
    label: str | None = None  # the page's printed label where it differs from `page` (a PDF's "ii")


class DocumentText(BaseModel):
    id: str
    text: str
    pages: list[PageSpan]


def blank(text: str) -> bool:
    """Whether ``text`` shows nothing: only whitespace and characters that are neither printable nor
    space (zero-width space U+200B, word joiner U+2060, byte order mark U+FEFF, joiners, controls)."""
    return not any(ch.isprintable() and not ch.isspace() for ch in text)


class AnswerRequest(Body):
    """A question about one document. Only `question` is required; null means unset for the rest."""

    question: str = Field(max_length=MAX_QUESTION_CHARS)  # not empty nor blank: _not_blank
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_ANSWER_TOKENS)
    temperature: Finite = Field(default=0.0, ge=0.0, le=5.0)
    top_k: int = Field(default=0, ge=0)
    top_p: Finite = Field(default=1.0, gt=0.0, le=1.0)
    seed: int | None = Field(default=None, ge=-(2**63), lt=2**63)  # negative (-1): unseeded
    stop: list[str] | None = Field(default=None, max_length=16)
    verify16: bool = False  # 16-token verification mode; wins over draft_tokens
    draft_tokens: int | None = Field(default=None, ge=0, le=MAX_WINDOW)  # 0 = no speculation
    draft_source: DraftSource = "all"  # which drafters may fill the window
    mode: AnswerMode | None = None  # quote-first or direct; null: the server's choice (DOCQA_ANSWER_MODE)
    stream: bool = False

    @field_validator("question")
    @classmethod
    def _not_blank(cls, question: str) -> str:
        """An empty question, or one of whitespace only (zero-width spaces and joiners included:
        :func:`blank`), is refused, as the chat route refuses an empty last message."""
        if blank(question):
            why = "only whitespace" if question else "no text"
            raise PydanticCustomError("empty_question", f"the question is empty ({why}); send its text")
        return question


class SegmentUsed(BaseModel):
    """A segment of a long document that an answer came from (ingest/segments.py)."""

    index: int  # 0-based
    pages: list[int]  # [first, last], as printed
    score: float | None = None  # its BM25 score for the question (higher is better)
    part: int | None = None  # index + 1
    parts: int | None = None  # how many segments the document has
    chars: list[int] | None = None  # [start, end) character offsets into the document text
    label: str | None = None  # what it is, for people (server/service/segmented.py label)
    document_id: str | None = None  # a collection's answer: the document it is (or is a segment of)
    document_name: str | None = None


class AnswerStatsPublic(BaseModel):
    prompt_tokens: int  # tokens evaluated for this answer (question suffix, plus any replay)
    cached_tokens: int  # document prefix tokens reused from the saved state (not prefilled again)
    completion_tokens: int
    ttft_ms: float
    decode_tokens_per_s: float
    drafted_tokens: int
    accepted_tokens: int
    verify_steps: int
    finish_reason: str  # stop | length | repetition (a loop, spec/repetition.py) | cancelled | not_found
    drafted_by_source: dict[str, int]  # {"mtp": n, "lookup": n}
    accepted_by_source: dict[str, int]
    mean_accepted_per_step: float  # accepted draft tokens per verify step
    segments: list[SegmentUsed] | None = None  # a segmented document: the segments answered from ([]: none matched)
    replica: str | None = None  # the server that answered (DOCQA_REPLICA_NAME; a reader replica in a cluster)
    # hot (in RAM) | restored (from its snapshot on disk) | prefilled (just ingested) | reading (the part read so far)
    document_state: str = "hot"
    # The machine was busy when the answer ended ("load average 8.2 on 2 cores": the 1-minute load at
    # least its cores), so its times are slower than this machine's own; null: it was not.
    busy: str | None = None


class CitationPublic(BaseModel):
    """A document span the answer quotes."""

    start: int  # character offsets into the document text (GET /v1/documents/{id}/text), [start, end)
    end: int
    page: int  # 1-based page of `start`
    page_end: int  # 1-based page of the last cited character
    text: str
    # quote (a quote-first answer's quote) | lookup (accepted copied drafts) | match (answer n-grams) | lookup+match
    source: str
    verified: bool = True  # the document's text as the answer gives it (quote, lookup); a match: the same words
    where: str | None = None  # a spreadsheet's cells ("Sheet2!B7", "Sheet2!A7:C9") or a slide ("slide 3 notes")
    document_id: str | None = None  # a collection's answer: the document quoted (None: the one asked about)
    document_name: str | None = None


class QuotePublic(BaseModel):
    """A quote-first answer's quote: the passage of the document the model copied before answering,
    and whether the model judged that it answers the question."""

    text: str  # the document's text of the passage ("" when the model said no passage answers)
    verified: bool  # the document's own text, and judged to answer the question: the answer's citation
    citation: CitationPublic | None = None  # where it is, when verified
    passage: CitationPublic | None = None  # where it is, when it is the document's but does not answer
    support: float | None = None  # the model's probability that the passage answers (null: not asked)
    reason: str | None = None  # why the answer is "The document does not say." (one line), when it is
    #: why, as a word (spec/quote.py REFUSALS): number | no_passage | not_answered | none | not_read_yet;
    #: ``not_answered`` (no passage judged to answer) is the one an answer without a quote may help
    refusal: Refusal | None = None


class ReadThroughPublic(BaseModel):
    page: int  # the last page reached (the document's own numbering)
    char: int  # characters of the document's text read


class PageRangePublic(BaseModel):
    first: int
    last: int


class UnreadPublic(BaseModel):
    """A collection's document still being read, left out of an answer."""

    document_id: str
    document_name: str
    share: float  # of its tokens read, 0..1


class PartialPublic(BaseModel):
    """An answer from the part of a document read so far: its first reading was still going on
    (DOCQA_ASK_WHILE_READING). What lies beyond ``read_through`` was not in reach of this answer. A
    collection's answer with documents still being read names them in ``unread`` instead (no
    ``read_through`` nor ``pages``); its ``share`` is of the collection's tokens answered from."""

    read_through: ReadThroughPublic | None = None
    share: float | None  # of the document's tokens read, 0..1 (a collection's: None while not known)
    pages: PageRangePublic | None = None  # the whole document's pages
    unread: list[UnreadPublic] | None = None


class SegmentAnswerPublic(BaseModel):
    """One of the answers from a segmented document whose two best segments ranked close."""

    index: int
    pages: list[int]
    part: int | None = None
    parts: int | None = None
    chars: list[int] | None = None
    label: str | None = None
    document_id: str | None = None  # a collection's answer: the document it came from
    document_name: str | None = None
    text: str
    citations: list[CitationPublic]
    quote: QuotePublic | None = None


class AnswerResponse(BaseModel):
    answer: str
    citations: list[CitationPublic]
    stats: AnswerStatsPublic
    mode: AnswerMode = "direct"  # how it was written
    quote: QuotePublic | None = None  # a quote-first answer's quote (null: a direct answer)
    answers: list[SegmentAnswerPublic] | None = None  # each segment's answer, when two were answered from
    partial: PartialPublic | None = None  # answered from the part read so far (null: from the whole document)


class CollectionRequest(BaseModel):
    """A new collection: documents already uploaded (and ready), asked together under ``name``."""

    name: str = Field(min_length=1, max_length=MAX_COLLECTION_NAME)
    document_ids: list[str] = Field(min_length=1, max_length=MAX_COLLECTION_DOCUMENTS)


class CollectionDocument(BaseModel):
    """A document of a collection, as the collection shows it."""

    id: str
    name: str
    status: str  # ingesting | ready | failed
    pages: int
    tokens: int


class CollectionPublic(BaseModel):
    """A collection: its documents in order (a deleted document has left it)."""

    id: str
    name: str
    created_at: float
    status: str  # ready (every document is) | ingesting (one is being prepared again) | failed | empty
    documents: list[CollectionDocument]


class CollectionList(BaseModel):
    collections: list[CollectionPublic]
