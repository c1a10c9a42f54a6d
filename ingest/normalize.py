"""Text normalisation shared by every format.

Rules (one place, so the stored text, the page map and the tokens agree):
* CRLF and lone CR become LF.
* Unicode NFKC (UAX #15), so presentation forms such as the ligature U+FB01 become plain letters.
* Control characters (Unicode category Cc) are dropped except LF and TAB; so are lone surrogates
  and U+FEFF (a byte-order mark left inside text).
"""

from __future__ import annotations

import re
import unicodedata

_DROP = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufeff]")


def normalize_text(text: str) -> str:
    """Return ``text`` normalised as described in the module docstring."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = unicodedata.normalize("NFKC", text)
    return _DROP.sub("", text)
