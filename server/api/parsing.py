"""Why a request body could not be parsed, in words a client can act on.

FastAPI answers every failure of ``json.loads`` but a syntax error with a bare 400 "There was an error
parsing the body", and Starlette every failure of the multipart parser with "Invalid multipart data."
or its own size message, both raised from (or while handling) the parser's exception. So a 5,000-digit
seed (Python refuses to convert integers of more than ``sys.get_int_max_str_digits()`` digits, CVE-
2020-10735), JSON nested 5,000 deep (``RecursionError``), a body that is not UTF-8, a file name over
python-multipart's 4 KiB part-header limit, a part with 50,000 header lines (its limit on their
number) and a 2 MB password (Starlette's 1 MiB limit on a form field)
all got the same generic message. :func:`unparsable` reads the exception chain and names the problem.
"""

from __future__ import annotations

import sys

from python_multipart.exceptions import FormParserError, MultipartParseError
from starlette.formparsers import MultiPartException

from server.config.errors import InvalidRequest

#: python-multipart's limit on one header line of a part (python_multipart.multipart.DEFAULT_MAX_HEADER_SIZE).
PART_HEADER_BYTES = 4096 + 128
_FORM = "send multipart/form-data with the file in the `file` field"


def unparsable(exc: BaseException) -> InvalidRequest | None:
    """The 422 that names why the body behind the generic 400 ``exc`` could not be parsed (the first
    exception in its chain that :func:`_why` recognizes), or None."""
    seen: set[int] = set()
    cause = exc.__cause__ or exc.__context__
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if (message := _why(cause)) is not None:
            return InvalidRequest(message)
        cause = cause.__cause__ or cause.__context__
    return None


def _why(exc: BaseException) -> str | None:
    if isinstance(exc, RecursionError):
        return (
            "the JSON body is nested too deeply to parse (arrays or objects about "
            f"{sys.getrecursionlimit()} levels deep); docqa's requests are a few levels deep"
        )
    if isinstance(exc, UnicodeDecodeError):
        return f"the JSON body is not valid UTF-8 (byte {exc.start}: {exc.reason}); send it UTF-8 encoded"
    if isinstance(exc, MultipartParseError) and "header count" in str(exc).lower():
        return (
            f"a part of the upload has too many header lines ({exc}); a part needs two at most (Content-Disposition "
            f"and Content-Type): {_FORM}"
        )
    if isinstance(exc, MultipartParseError) and "header" in str(exc).lower():
        return (
            f"a part header of the upload is over {PART_HEADER_BYTES} bytes ({exc}), most likely its file name: "
            "send the file under a shorter name (docqa keeps 200 characters of it)"
        )
    if isinstance(exc, FormParserError):
        return f"the upload is not a readable multipart form ({exc}); {_FORM}"
    if isinstance(exc, MultiPartException):
        if exc.__cause__ is not None:  # "Invalid multipart data.": the parser's own error says more
            return None
        if "exceeded maximum size" in exc.message:
            return (
                f"a form field of the upload other than the file is too large ({exc.message}); `password`, `pages` "
                "and `chars` are short strings"
            )
        return f"the upload is not a readable multipart form ({exc.message}); {_FORM}"
    if isinstance(exc, ValueError) and "integer string conversion" in str(exc):
        return (
            f"a number in the JSON body has more than {sys.get_int_max_str_digits()} digits; numbers here are at most "
            "64-bit (a seed is from -2**63 to 2**63-1)"
        )
    return None


def json_invalid(position: object, error: object) -> InvalidRequest:
    """A JSON syntax error (FastAPI's ``json_invalid``, with the character position) as a 422 that says so."""
    return InvalidRequest(f"the body is not valid JSON (character {position}: {error}); send a JSON object")
