"""The settings of documents: where they are stored and how much disk and RAM their states may take,
how uploads are read (the extraction worker's limits, the text rules), and how a document longer than
the context is split. A part of :class:`server.config.settings.Settings`; every field is documented in
docs/settings.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings

from ingest.normalize import TEXT_RULES
from ingest.ocr import LANGUAGES, OcrSettings
from runtime.plan_fit import parse_size


class DocumentSettings(BaseSettings):
    """Storage, extraction and segments."""

    data_dir: Path = Field(default=Path("data"), description="Database, uploads, model copy and snapshots.")
    snapshot_ram_bytes: int = Field(
        default=2 * 1024**3, ge=0, description="RAM kept for hot document snapshots (LRU, bytes)."
    )
    disk_budget_bytes: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Bytes the documents directory may take (or 50GiB / 500MB): the least recently used snapshots "
            "are evicted to stay within it (texts kept; prefilled again when asked about). Unset: no budget."
        ),
    )
    traffic_log: bool = Field(
        default=True,
        description="One JSON line per answer (lengths, concurrency, window, timings) in DATA_DIR/traffic.jsonl.",
    )
    traffic_log_bytes: int = Field(
        default=8 * 1024**2, ge=4096, description="Size at which traffic.jsonl rotates (two older files are kept)."
    )

    resume_check_s: float = Field(
        default=30.0,
        gt=0,
        description="Seconds between checks for documents left `ingesting` with no prefill running (resumed).",
    )

    # -- extraction --------------------------------------------------------------------------
    extract_timeout_s: float = Field(default=60.0, gt=0, description="Wall-clock limit of one text extraction.")
    extract_workers: int = Field(default=2, ge=1, le=64, description="Files read at once, each in a worker process.")
    extract_queue: int = Field(
        default=8, ge=0, description="Uploads that may wait for an extraction worker; more get 503 with Retry-After."
    )
    extract_queue_bytes: int | None = Field(
        default=256 * 1024**2,
        ge=1,
        description=(
            "Bytes of uploads that may wait for extraction (or 256MiB); more get 503 with Retry-After. "
            "One upload is always admitted when none waits."
        ),
    )
    extract_memory_bytes: int = Field(
        default=1024**3, ge=64 * 1024**2, description="Address-space limit of the extraction worker process."
    )
    debug_text_rules: int = Field(
        default=TEXT_RULES,
        ge=1,
        le=TEXT_RULES,
        validation_alias=AliasChoices("DOCQA_DEBUG_TEXT_RULES", "DOCQA_TEXT_RULES"),  # the old name: deprecated
        description=(
            "Debug/compatibility: text rules version for new extractions (ingest/normalize.py); 1 = the raw "
            "lines of earlier versions, for bench/reflow.py's side by side and the reingest tests."
        ),
    )
    ocr: Literal["auto", "off", "force"] = Field(
        default="auto",
        description=(
            "OCR of PDF pages with Tesseract (ingest/ocr.py): auto = only pages without usable text (no text "
            "layer, or one that reads as garbage); force = every page; off = none (a scan gets 422 no_text_layer)."
        ),
    )
    ocr_languages: str = Field(
        default="eng",
        description="Tesseract languages for OCR, joined with + (eng+deu); each needs its pack (tesseract-ocr-deu).",
    )
    ocr_page_timeout_s: float = Field(
        default=60.0, gt=0, description="Seconds one page may take to OCR; the extraction limit grows by this a page."
    )

    # -- long documents ----------------------------------------------------------------------
    long_documents: Literal["segment", "refuse"] = Field(
        default="segment",
        description=(
            "A document over the budget: segment = split into segments that each fit (each prefilled and "
            "snapshotted; questions answered from the best-ranked one); refuse = 413 document_too_long."
        ),
    )
    reingest_unfit: bool = Field(
        default=False,
        description=(
            "Re-read, after start-up, every document whose saved state no longer fits the context (DOCQA_N_CTX "
            "lowered since it was read); off: it is marked needs_reingest and waits for the user's re-ingest."
        ),
    )
    segment_overlap_tokens: int = Field(
        default=256, ge=0, description="Tokens neighbouring segments share, so a passage at a cut is whole in one."
    )
    max_segments: int = Field(
        default=16, ge=1, description="Most segments a document may have; a longer one gets 413 document_too_long."
    )
    segment_close_ratio: float = Field(
        default=0.8,
        ge=0.0,
        le=1.0,
        description=(
            "Answer from the second-best segment too when its BM25 score is at least this x the best's (0: never)."
        ),
    )

    @field_validator("ocr_languages")
    @classmethod
    def _languages(cls, value: str) -> str:
        if not LANGUAGES.fullmatch(value):
            raise ValueError("write Tesseract language codes joined with +, e.g. eng or eng+deu")
        return value

    def ocr_settings(self) -> OcrSettings:
        """The OCR settings as the extraction worker takes them (ingest/worker.py)."""
        return OcrSettings(self.ocr, self.ocr_languages, self.ocr_page_timeout_s)

    @field_validator("disk_budget_bytes", "traffic_log_bytes", "extract_queue_bytes", mode="before")
    @classmethod
    def _bytes(cls, value: object) -> object:
        return parse_size(value) if isinstance(value, str) else value
