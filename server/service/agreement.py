"""Whether the parts of a long document that answered one question agree (issue 39 item 10: Alice,
"What colour were the White Rabbit's eyes?" gave "white" from part 2 and "pink" from part 1, side by
side, without a word).

A segmented answer (server/service/segmented.py) answers from the one or two best-matching parts, each on
its own. When two parts both answer, and neither answer's words are contained in the other's (after
case, punctuation and a few function words are set aside), the parts differ: the answer ends with a
note that names each part and what it says, and both parts' citations stay with the answer. The
check is lexical, so two answers that say the same in other words are also called different; the
note says "answer differently", which is true of both, and sends the reader to the cited pages. A part
that says the document does not say (ingest/prompt.py ``is_not_said``) claims nothing, and differs from
nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ingest.prompt import is_not_said

_WORD = re.compile(r"\w+")
#: Words that change nothing of what an answer claims ("The eyes were pink." and "pink" agree).
_FUNCTION = frozenset(
    "a an the and or of to in on at by for with from as is are was were be been it its this that these those "
    "he she they his her their them there here which who whom what when where how very so also".split()
)
SHOWN_CHARS = 80  # of each part's answer, in the note


def _claims(text: str) -> frozenset[str]:
    return frozenset(w for w in _WORD.findall(text.casefold()) if w not in _FUNCTION)


def _shown(text: str) -> str:
    flat = " ".join(text.split())
    return f"“{flat if len(flat) <= SHOWN_CHARS else flat[: SHOWN_CHARS - 1] + '…'}”"


def differ(parts: Sequence[Mapping[str, Any]]) -> str | None:
    """The note for parts that answered differently, or None when they agree (or fewer than two
    answered). ``parts``: each ``{label, text, ...}`` (a segmented answer's parts, in order):
    'The parts answer differently: pages 1–5 say “white”; pages 6–9 say “pink”. Both are cited: check
    them.'"""
    said = [p for p in parts if p.get("text", "").strip() and not is_not_said(p["text"])]
    if len(said) < 2:
        return None
    claims = [_claims(p["text"]) for p in said]
    if all(a <= b or b <= a for i, a in enumerate(claims) for b in claims[i + 1 :]):
        return None
    say = ["say" if p["label"].startswith("pages") else "says" for p in said]  # "pages 1–5 say", "page 3 says"
    each = "; ".join(f"{p['label']} {verb} {_shown(p['text'])}" for p, verb in zip(said, say, strict=True))
    return f"The parts answer differently: {each}. Both are cited: check them."
