"""What an answer emits as it is decoded (spec/loop.py), and what a constraint shows (spec/constraint.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TokenEvent:
    text: str  # UTF-8 safe text delta, possibly "" while a stop string is undecided
    token_ids: tuple[int, ...]
    n_accepted: int  # drafts accepted in the step that produced these tokens
    part: str = "answer"  # "answer", or "quote": a quote-first answer's passage, once it stands (spec/quote.py)
