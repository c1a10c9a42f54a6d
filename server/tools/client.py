"""What the CLI's server commands share (server/tools/remote.py): where the server is, an HTTP client
whose connection failures are one line, and the API's errors told in the CLI's words.

The server's URL comes from ``--url`` (before or after the command), else ``DOCQA_URL``, else
``http://DOCQA_HOST:DOCQA_PORT`` (the variables ``docqa serve`` binds with), else http://127.0.0.1:8000.

The API's messages are written for HTTP clients ("list them with GET /v1/documents", "send its
password in the `password` form field"). The CLI keeps them as they are and, by the error's type
(server/config/errors.py STATUS), says instead or adds what to do with the CLI's own commands and
flags (:func:`explain`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import click
import httpx

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000

URL_HELP = "docqa server URL [default: DOCQA_URL, else http://DOCQA_HOST:DOCQA_PORT, else http://127.0.0.1:8000]"
KEY_HELP = "API key, if the server needs one (its DOCQA_API_KEY) [env var: DOCQA_API_KEY]"


def default_url() -> str:
    """The server the environment names: DOCQA_URL, else DOCQA_HOST and DOCQA_PORT, as ``docqa serve`` binds."""
    if url := os.environ.get("DOCQA_URL"):
        return url
    host = os.environ.get("DOCQA_HOST") or DEFAULT_HOST
    port = os.environ.get("DOCQA_PORT") or str(DEFAULT_PORT)
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)  # a bind-everything address: connect locally
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    return f"http://{host}:{port}"


def server_options(command: Callable) -> Callable:
    """``--url`` and ``--api-key`` on a subcommand, so they may follow it (``docqa list --url ...``)."""
    command = click.option("--api-key", default=None, help=KEY_HELP)(command)
    return click.option("--url", default=None, metavar="URL", help=URL_HELP)(command)


@contextmanager
def client(ctx: click.Context, url: str | None, api_key: str | None) -> Iterator[httpx.Client]:
    """An HTTP client for the server; a connection failure becomes one line naming the URL."""
    url = (url or ctx.obj["url"] or default_url()).rstrip("/")
    api_key = api_key or ctx.obj["api_key"]
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=httpx.Timeout(30.0, read=None)) as http:
            yield http
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
        raise click.ClickException(
            f"{url!r} is not a server URL ({_reason(exc)}); write it as http://HOST:PORT"
        ) from None
    except httpx.ConnectError as exc:
        raise click.ClickException(
            f"cannot reach a docqa server at {url} ({_reason(exc)}); start one with `docqa serve`, "
            "or give its address with --url or DOCQA_URL"
        ) from None
    except httpx.TransportError as exc:  # a timeout, a dropped connection
        raise click.ClickException(f"lost the connection to the docqa server at {url} ({_reason(exc)})") from None


def _reason(exc: Exception) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


@dataclass(frozen=True, slots=True)
class About:
    """What the command was about, for the words of an error: the document id, the file, the
    collection id."""

    doc: str | None = None
    file: str | None = None
    collection: str | None = None


def explain(error_type: str, message: str, details: dict, about: About) -> str:
    """The API error ``error_type`` (with its ``message`` and extra fields) in the CLI's words."""
    doc, file = about.doc or "?", about.file or "the file"
    if error_type == "unauthorized":
        return "this server needs an API key: give it with --api-key KEY or DOCQA_API_KEY"
    if error_type == "document_not_found":
        return f"no document with id {doc!r} on this server; list them with `docqa list`"
    if error_type == "collection_not_found":
        where = f"no collection with id {about.collection or '?'!r} on this server"
        return f"{where}; make one with `docqa collect NAME DOC...`"
    if error_type == "invalid_documents":
        return f"{message}; `docqa list` shows the documents and their status"
    if error_type == "password_required":
        return f"{file} is an encrypted PDF: give its password with --password"
    if error_type == "wrong_password":
        return f"that password does not open {file}: check --password"
    if error_type == "document_too_long":
        return _too_long(file, details)
    if error_type == "outside_document":
        return f"{message} (--pages / --chars)"
    if error_type in ("document_ingesting", "document_not_ready", "snapshot_missing"):
        return f"{message}; follow it with `docqa status {doc}`"
    if error_type == "document_failed":
        return f"{message}; remove it with `docqa delete {doc}` and ingest the file again"
    if error_type == "snapshot_incompatible":
        return f"{message}; or remove it with `docqa delete {doc}` and ingest the file again"
    if error_type in ("engine_unavailable", "kv_cache_full", "extractor_busy", "store_busy"):
        return f"{message} (`docqa status` shows the server's state)"
    return message


def _too_long(file: str, details: dict) -> str:
    n, limit, fits = details.get("n_tokens"), details.get("limit"), details.get("fits")
    text = f"{file} is too long for this server"
    if isinstance(n, int) and isinstance(limit, int):
        about = "about " if details.get("estimated") else ""
        text += f": {about}{n:,} tokens, at most {limit:,} fit in one piece"
    if fits:
        unit, (a, b) = next(iter(fits.items()))
        text += f"; ingest the part that fits with --{unit} {a}-{b}"
    return text + "; or split the file, or run the server with a larger DOCQA_N_CTX or DOCQA_LONG_DOCUMENTS=segment"


def fail(response: httpx.Response, about: About = About()) -> None:
    """Raise the ClickException for an error response: ``STATUS: what happened and what to do``."""
    try:
        error = response.json()["error"]
        error_type, message = error.get("type", ""), error["message"]
        details = {k: v for k, v in error.items() if k not in ("type", "message")}
    except (ValueError, KeyError, TypeError, AttributeError):
        raise click.ClickException(f"{response.status_code}: {response.text.strip()}") from None
    raise click.ClickException(f"{response.status_code}: {explain(error_type, message, details, about)}")


def check(response: httpx.Response, about: About = About()) -> httpx.Response:
    if response.status_code >= 400:
        fail(response, about)
    return response
