import pytest

from ingest.normalize import normalize_text


@pytest.mark.parametrize(
    ("raw", "expected", "why"),
    [
        ("misﬁts diﬀerent", "misfits different", "NFKC turns ligature code points into letters"),
        ("a\x00b\x07c", "abc", "NUL and other C0 controls are dropped"),
        ("line\r\nnext\rlast", "line\nnext\nlast", "CRLF and lone CR become LF"),
        ("tab\there\nnew", "tab\there\nnew", "TAB and LF survive"),
        ("\ufeffstart", "start", "a BOM left inside text is dropped"),
        ("x\x85y\x9fz", "xyz", "C1 controls are dropped"),
        ("e\u0301", "\u00e9", "NFKC composes combining marks"),
        ("bad\ud800surrogate", "badsurrogate", "lone surrogates cannot be encoded; dropped"),
        ("👩\u200d💻", "👩\u200d💻", "ZWJ emoji sequences are kept (ZWJ is Cf, not Cc)"),
    ],
)
def test_normalize(raw: str, expected: str, why: str) -> None:
    assert normalize_text(raw) == expected, why


def test_no_pages_is_an_empty_text_not_a_value_error():
    # Issue 27: an EPUB with no readable chapter gave normalize_pages([]), which raised ValueError (500).
    from ingest.normalize import normalize_pages

    assert normalize_pages([], paged=False) == ("", [])
    assert normalize_pages([], paged=True) == ("", [])
