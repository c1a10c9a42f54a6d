"""Text bytes to str: byte-order marks, UTF-8, then charset-normalizer for the legacy encodings.

Order, first match wins:
1. A byte-order mark: UTF-8, UTF-16 LE/BE, UTF-32 LE/BE (the BOM is stripped).
2. Strict UTF-8 (pure ASCII included): by far the commonest, and decoding it is proof enough.
3. charset-normalizer (https://github.com/jawah/charset_normalizer), limited to :data:`LEGACY`:
   Windows-1252 (a superset of Latin-1's printable characters) and the common CJK encodings. Left
   unrestricted it reads short Western text as Baltic or Cyrillic code pages ("CAFÉ" as "CAFЙ"). Its
   answer is taken when the decoded text reads cleanly (mess ratio at most :data:`MAX_CHAOS`), or
   reads as a language (coherence at least :data:`MIN_COHERENCE`) with a little more mess allowed
   (:data:`MAX_CHAOS_COHERENT`; accented French scores ~0.08). A damaged UTF-8 file decoded as
   Shift_JIS scores ~0.08 with no coherence, and falls through to 4.
4. Otherwise UTF-8 with U+FFFD for the bytes that do not decode (a damaged UTF-8 file).

Before 2-4, NUL bytes are dropped (stray NULs from a broken editor or a bad copy). A file whose
first :data:`SNIFF_BYTES` are more than :data:`MAX_CONTROL_SHARE` NUL or other control bytes is
binary data, or UTF-16/32 without a BOM, and is refused with UnsupportedType (random or compressed
bytes are ~10 % control bytes; text with a few stray NULs a tiny fraction of a percent).
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass

from ingest.errors import UnsupportedType

LEGACY = ("cp1252", "gb18030", "big5", "cp932", "euc_jp", "cp949", "iso2022_jp")
MAX_CHAOS = 0.05  # charset-normalizer's mess ratio (0 = clean text, 1 = noise)
MAX_CHAOS_COHERENT, MIN_COHERENCE = 0.15, 0.2  # coherence: how much the text reads as a known language
SNIFF_BYTES = 64 * 1024
MAX_CONTROL_SHARE = 0.05
MIN_CONTROL_BYTES = 8  # fewer is stray bytes in a short file, whatever the share

_BOMS = (  # UTF-32 LE first: its BOM starts with UTF-16 LE's
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
# C0 controls that plain text does not contain: all but TAB, LF, VT, FF, CR and ESC (ANSI colours).
_CONTROL = bytes(b for b in range(32) if b not in (9, 10, 11, 12, 13, 27))


@dataclass(frozen=True, slots=True)
class Decoded:
    text: str
    encoding: str  # Python codec name: utf-8, utf-8-sig, utf-16, utf-32, cp1252, gb18030, cp932, ...
    dropped_nuls: int = 0  # NUL bytes removed before decoding


def bom_encoding(data: bytes) -> str | None:
    """The codec named by a leading byte-order mark, or None."""
    return next((name for bom, name in _BOMS if data.startswith(bom)), None)


def binary(data: bytes) -> str | None:
    """What ``data`` is when its start is mostly NUL or control bytes ("binary data (31 % of ...)"), or None."""
    if bom_encoding(data):
        return None
    head = data[:SNIFF_BYTES]
    n_control = len(head) - len(head.translate(None, _CONTROL))
    if n_control >= MIN_CONTROL_BYTES and n_control / len(head) > MAX_CONTROL_SHARE:
        share = 100 * n_control / len(head)
        return f"binary data ({share:.0f} % of its first {len(head)} bytes are NUL or control bytes)"
    return None


#: Why text can look binary, for the refusal of binary data.
NEEDS_BOM = "UTF-16 or UTF-32 text needs a byte-order mark: save it as UTF-8 or with a BOM"


def decode_text(data: bytes) -> Decoded:
    """Decode the bytes of a text file as described in the module docstring.

    Raises UnsupportedType for binary data; otherwise never raises (undecodable bytes become U+FFFD).
    """
    bom = bom_encoding(data)
    if bom:
        return Decoded(data.decode(bom, errors="replace"), bom)  # the utf-16/32/-sig codecs strip the BOM
    what = binary(data)
    if what is not None:
        raise UnsupportedType(f"the file is {what}, not text ({NEEDS_BOM})")
    n_nul = data.count(b"\x00")
    if n_nul:
        data = data.replace(b"\x00", b"")
    try:
        return Decoded(data.decode("utf-8"), "utf-8", n_nul)
    except UnicodeDecodeError:
        pass
    from charset_normalizer import from_bytes

    best = from_bytes(data, cp_isolation=list(LEGACY)).best()
    if best is not None and (
        best.chaos <= MAX_CHAOS or (best.coherence >= MIN_COHERENCE and best.chaos <= MAX_CHAOS_COHERENT)
    ):
        return Decoded(data.decode(best.encoding, errors="replace"), best.encoding, n_nul)
    return Decoded(data.decode("utf-8", errors="replace"), "utf-8", n_nul)
