"""The CLI commands that talk to a running server: ingest, ask, list, status, delete (server/tools/cli.py
adds them to ``docqa``). Where the server is, and the words of its errors: server/tools/client.py.

Output: what a script wants on stdout (an id, the answer, the table of documents), progress, stats and
notes on stderr. Exit status 1 for any error, one line; for an answer with no text too.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import click
import httpx

from server.tools.client import About, check, client, fail, server_options
from server.tools.shown import LIST_HEADER, list_row, print_answer, reading_line, segment_lines, warning_lines

#: Seconds between two looks at a document being prepared (each is one line of the server's access log).
POLL_S = 1.0
_RANGE = re.compile(r"\d+(-\d+)?")
_LABELS = re.compile(r"[^\s-]+(-[^\s-]+)?")  # printed page labels: ii-3 (ingest/cut.py)


def _range(unit: str):
    def validate(_ctx, _param, value: str | None) -> str | None:
        allowed = _LABELS if unit == "pages" else _RANGE
        if value is not None and not allowed.fullmatch(value.strip()):
            example = "--chars 0-50000"
            if unit == "pages":
                example = "--pages 1-80 (or --pages 7, or by printed labels --pages ii-3)"
            raise click.BadParameter(f"{value!r} is not a range; write it as {example}")
        return value.strip() if value else None

    return validate


@click.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--password", default=None, help="password of an encrypted PDF")
@click.option(
    "--pages",
    default=None,
    callback=_range("pages"),
    metavar="A-B",
    help="ingest only PDF pages A-B (from 1), e.g. the part of a long PDF that fits; ii-3: by printed labels",
)
@click.option("--labels", is_flag=True, help="--pages gives the labels printed on the pages (1 = the page printed 1)")
@click.option(
    "--chars", default=None, callback=_range("chars"), metavar="A-B", help="ingest only characters [A, B) of the text"
)
@server_options
@click.pass_context
def ingest(ctx, file: Path, password, pages, labels: bool, chars, url, api_key) -> None:
    """Upload FILE and wait until it is prefilled, with a progress bar. Prints the document id."""
    if pages and chars:
        raise click.UsageError("give --pages or --chars, not both")
    if labels and not pages:
        raise click.UsageError("--labels says how to read --pages: give --pages too")
    about = About(file=file.name)
    fields = {"password": password, "pages": pages, "chars": chars, "labels": "true" if labels else None}
    form = {k: v for k, v in fields.items() if v}
    with client(ctx, url, api_key) as http:
        r = check(http.post("/v1/documents", files={"file": (file.name, file.read_bytes())}, data=form), about)
        doc = r.json()
        about = About(doc=doc["id"], file=file.name)
        if r.status_code == 200:
            click.echo(f"{file.name} is already on the server as {doc['id']} ({doc['status']})", err=True)
        info = _follow(http, doc["id"], file.name, about)
        click.echo(f"{doc['id']}\t{info['pages']} pages\t{info['tokens']} tokens", err=True)
        for line in segment_lines(info):
            click.echo(line, err=True)
        for line in warning_lines(info.get("warnings", [])):
            click.echo(f"warning: {line}", err=True)
        click.echo(doc["id"])


def _follow(http: httpx.Client, doc_id: str, name: str, about: About) -> dict:
    """Wait for document ``doc_id`` to be prefilled, with a progress bar that shows the server's rate
    and time left (or that it waits its turn: reading_line), not click's own guess from the bar's
    steps; its final state. Raises ClickException when it failed."""
    bar = click.progressbar(
        length=1000, label=f"prefill {name}", file=sys.stderr, show_eta=False, item_show_func=_reading
    )
    with bar:
        shown = 0
        while True:
            info = check(http.get(f"/v1/documents/{doc_id}"), about).json()
            done = int(info["progress"] * 1000) if info["status"] != "ready" else 1000
            bar.update(done - shown, current_item=info)
            shown = done
            if info["status"] != "ingesting":
                break
            time.sleep(POLL_S)
    if info["status"] == "failed":
        raise click.ClickException(
            f"ingestion failed: {info['error']}; remove it with `docqa delete {doc_id}` and try again"
        )
    return info


@click.command()
@click.argument("doc")
@click.option("--password", default=None, help="password of an encrypted PDF (passwords are never stored)")
@server_options
@click.pass_context
def reingest(ctx, doc: str, password: str | None, url, api_key) -> None:
    """Read document DOC again from its stored upload, at this server's context and text rules (after
    DOCQA_N_CTX changed, a model or an upgrade; a longer document is read in parts), and wait for it."""
    about = About(doc=doc)
    with client(ctx, url, api_key) as http:
        r = check(http.post(f"/v1/documents/{doc}/reingest", json={"password": password} if password else None), about)
        created = r.json()
        if created.get("note"):
            click.echo(f"note: {created['note']}", err=True)
        info = _follow(http, doc, created["name"], about)
    click.echo(f"{doc}\t{info['pages']} pages\t{info['tokens']} tokens", err=True)
    for line in segment_lines(info):
        click.echo(line, err=True)
    click.echo(doc)


def _reading(info: dict | None) -> str | None:
    return reading_line(info) if info and info.get("status") == "ingesting" else None


@click.command()
@click.argument("doc", required=False)
@click.argument("question", required=False)
@click.option(
    "--collection",
    default=None,
    metavar="ID",
    help="ask the documents of collection ID together (then give only QUESTION)",
)
@click.option("--max-tokens", type=int, default=None)
@click.option("--temperature", type=float, default=0.0, show_default=True)
@click.option("--verify16", is_flag=True, help="16-token verification: the model checks 16 drafted tokens a step")
@click.option("--draft-tokens", type=int, default=None, help="fixed draft window (0 = no speculation)")
@click.option(
    "--direct",
    is_flag=True,
    help="answer without a quote: for a question about the document as a whole, which no one passage answers",
)
@server_options
@click.pass_context
def ask(ctx, doc, question, collection, max_tokens, temperature, verify16, draft_tokens, direct, url, api_key) -> None:
    """Ask QUESTION about document DOC (``docqa ask DOC QUESTION``), or about the documents of a
    collection together (``docqa ask --collection ID QUESTION``; docs/collections.md); the answer
    streams to stdout, stats and citations (with their document's name) go to stderr. An answer with
    no text is an error (exit status 1)."""
    if collection is not None:
        if question is not None:
            raise click.UsageError("with --collection give only the QUESTION: docqa ask --collection ID QUESTION")
        doc, question = None, doc
    if question is None:
        raise click.UsageError("give DOC and QUESTION (docqa ask DOC QUESTION), or --collection ID QUESTION")
    if not question.strip():
        raise click.UsageError("the QUESTION is empty: docqa ask DOC 'your question'")
    body = {"question": question, "temperature": temperature, "verify16": verify16, "stream": True}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if draft_tokens is not None:
        body["draft_tokens"] = draft_tokens
    if direct:
        body["mode"] = "direct"
    about = About(doc=doc, collection=collection)
    path = f"/v1/collections/{collection}/answers" if collection is not None else f"/v1/documents/{doc}/answers"
    with client(ctx, url, api_key) as http, http.stream("POST", path, json=body) as r:
        if r.status_code >= 400:
            r.read()
            fail(r, about)
        print_answer(r, about)


@click.command(name="list")
@server_options
@click.pass_context
def list_documents(ctx: click.Context, url: str | None, api_key: str | None) -> None:
    """List documents: id, status, pages, tokens, when a watched folder's file was read and its folder
    ("-" for an upload), name (tab-separated, under a header)."""
    with client(ctx, url, api_key) as http:
        documents = check(http.get("/v1/documents")).json()["documents"]
    click.echo(LIST_HEADER)
    now = time.time()
    for d in documents:
        click.echo(list_row(d, now))
    if not documents:
        click.echo("no documents yet; add one with `docqa ingest FILE`", err=True)
    unfit = [d["id"] for d in documents if d.get("needs_reingest")]
    if unfit:
        click.echo(f"{len(unfit)} must be read again at this server's context: `docqa reingest {unfit[0]}`", err=True)


@click.command()
@click.argument("doc", required=False)
@server_options
@click.pass_context
def status(ctx: click.Context, doc: str | None, url: str | None, api_key: str | None) -> None:
    """The server's state (GET /health), or with DOC that document's: status, size, parts, warnings."""
    with client(ctx, url, api_key) as http:
        health = check(http.get("/health")).json()
        if doc is None:
            _server_status(http, health)
            return
        info = check(http.get(f"/v1/documents/{doc}"), About(doc=doc)).json()
    state = info["status"] if info["status"] != "ingesting" else f"preparing, {info['progress']:.0%}"
    if info["status"] == "ingesting" and reading_line(info):
        state += f": {reading_line(info)}"
    rows = [("id", info["id"]), ("name", info["name"]), ("status", state), ("kind", info.get("kind", "?"))]
    rows += [("pages", f"{info['pages']:,}"), ("tokens", f"{info['tokens']:,}")]
    if info.get("error"):
        rows.append(("error", info["error"]))
    if info.get("needs_reingest"):  # server/service/refit.py
        rows.append(("reingest", f"needed: {info['needs_reingest']}; run `docqa reingest {info['id']}`"))
    for name, value in rows:
        click.echo(f"{name:<8}{value}")
    for line in segment_lines(info, health.get("document_budget")):
        click.echo(line)
    for line in warning_lines(info.get("warnings", [])):
        click.echo(f"warning: {line}")


def _server_status(http: httpx.Client, health: dict) -> None:
    click.echo(f"server   {http.base_url}: {health['status']}")
    if health["status"] != "ok":
        if health.get("error"):
            click.echo(f"error    {health['error']}")
        return
    click.echo(f"model    {health['model']} ({health['model_file']})")
    click.echo(f"context  n_ctx {health['n_ctx']:,}; documents up to {health['document_budget']:,} tokens in one piece")
    click.echo(
        f"answers  {health['active_answers']} in progress, {health['queue_depth']} waiting "
        f"(at most {health['n_seq_max']} at once)"
    )
    click.echo(f"selftest {health['selftest']['status']}")
    r = http.get("/v1/documents")
    if r.status_code == 200:
        docs = r.json()["documents"]
        n = {s: sum(d["status"] == s for d in docs) for s in ("ready", "ingesting", "failed")}
        click.echo(f"documents {len(docs)}: {n['ready']} ready, {n['ingesting']} preparing, {n['failed']} failed")


@click.command()
@click.argument("docs", nargs=-1, required=True, metavar="DOC...")
@server_options
@click.pass_context
def delete(ctx: click.Context, docs: tuple[str, ...], url: str | None, api_key: str | None) -> None:
    """Delete documents DOC... (ids from `docqa list`): their text, saved state and upload."""
    with client(ctx, url, api_key) as http:
        for doc in docs:
            check(http.delete(f"/v1/documents/{doc}"), About(doc=doc))
            click.echo(f"deleted {doc}")


@click.command()
@click.argument("name")
@click.argument("docs", nargs=-1, required=True, metavar="DOC...")
@server_options
@click.pass_context
def collect(ctx: click.Context, name: str, docs: tuple[str, ...], url: str | None, api_key: str | None) -> None:
    """Make collection NAME of documents DOC... (ids from `docqa list`, ready), to ask them together
    with `docqa ask --collection ID QUESTION`. Prints the collection id."""
    with client(ctx, url, api_key) as http:
        made = check(http.post("/v1/collections", json={"name": name, "document_ids": list(docs)})).json()
    names = ", ".join(d["name"] for d in made["documents"])
    click.echo(f"collection {made['name']!r} of {len(made['documents'])} documents: {names}", err=True)
    click.echo(made["id"])


COMMANDS = (ingest, reingest, ask, collect, list_documents, status, delete)
