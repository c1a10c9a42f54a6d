"""The docqa CLI: against a real server started with ``docqa serve --host --port``, and with no server;
its words for the API's errors (server/tools/client.py) and an answer with no text (server/tools/remote.py)."""

from __future__ import annotations

import re
import sys

import pytest
from click.testing import CliRunner

from server.tools.cli import default_url, main
from server.tools.client import About, explain
from testkit.live import ROOT, Live, free_port

PDF = "pdf/pypdf-resources/crazyones.pdf"
LOCKED = "pdf/sample-files/005-libreoffice-writer-password/libreoffice-writer-password.pdf"
LONG_PDF = "pdf/sample-files/009-pdflatex-geotopo/GeoTopo-komprimiert.pdf"  # 117 pages, ~57k tokens
AGREEMENT = "synthetic/agreement-880-tokens.txt"
KEY = "cli-test-key"
# Nothing from the test process's environment decides where the CLI connects, unless a test says so.
NO_ENV = {"DOCQA_URL": None, "DOCQA_HOST": None, "DOCQA_PORT": None, "DOCQA_API_KEY": None}


def run(*args: str, **env: str | None):
    return CliRunner(env={**NO_ENV, **env}).invoke(main, list(args))


def test_cli_against_a_real_server(tmp_path, gemma_path, cases):
    server = Live(tmp_path / "cli", gemma_path, DOCQA_API_KEY=KEY, DOCQA_LONG_DOCUMENTS="refuse")
    # `docqa serve --host --port` wins over DOCQA_HOST / DOCQA_PORT, which point nowhere usable:
    # the server is found on server.port only if the options reached it.
    server.env.update(DOCQA_HOST="192.0.2.1", DOCQA_PORT=str(free_port()))
    server.argv = [sys.executable, "-m", "server.tools.cli", "serve", "--host", "127.0.0.1", "--port", str(server.port)]
    server.start()
    try:
        url = f"http://127.0.0.1:{server.port}"
        # --url and --api-key after the subcommand.
        r = run("ingest", str(cases / PDF), "--url", url, "--api-key", KEY)
        assert r.exit_code == 0, r.output
        doc_id = r.stdout.strip().splitlines()[-1]
        tokens = re.search(r"\t(\d+) tokens", r.stderr)
        assert "prefill crazyones.pdf" in r.stderr and tokens, r.stderr

        # The server's address from DOCQA_HOST / DOCQA_PORT (what `docqa serve` binds), the key from DOCQA_API_KEY.
        r = run("list", DOCQA_HOST="127.0.0.1", DOCQA_PORT=str(server.port), DOCQA_API_KEY=KEY)
        assert r.exit_code == 0, r.output
        assert r.stdout.splitlines()[0] == "ID\tSTATUS\tPAGES\tTOKENS\tREAD\tFOLDER\tNAME"  # a header
        # no READ, no FOLDER: an upload
        assert f"{doc_id}\tready\t1\t{tokens.group(1)}\t-\t-\tcrazyones.pdf" in r.stdout
        r = run("list", DOCQA_PORT=str(server.port), DOCQA_API_KEY=KEY)  # DOCQA_HOST unset: 127.0.0.1
        assert r.exit_code == 0 and doc_id in r.stdout, r.output
        # DOCQA_URL beats DOCQA_HOST / DOCQA_PORT; --url beats DOCQA_URL; after the command beats before it.
        r = run("list", DOCQA_URL=url, DOCQA_PORT=str(free_port()), DOCQA_API_KEY=KEY)
        assert r.exit_code == 0 and doc_id in r.stdout, r.output
        dead = f"http://127.0.0.1:{free_port()}"
        r = run("--url", url, "list", DOCQA_URL=dead, DOCQA_API_KEY=KEY)
        assert r.exit_code == 0 and doc_id in r.stdout, r.output
        r = run("--url", dead, "list", "--url", url, DOCQA_API_KEY=KEY)
        assert r.exit_code == 0 and doc_id in r.stdout, r.output
        r = run("list", "--url", url)  # no key
        assert r.exit_code == 1 and "401: this server needs an API key" in r.stderr, r.output
        assert "--api-key" in r.stderr and "DOCQA_API_KEY" in r.stderr and "Authorization" not in r.stderr

        r = run(
            "--url", url, "--api-key", KEY,
            "ask", doc_id, "Quote the whole text of the document verbatim.", "--max-tokens", "40", "--verify16",
        )  # fmt: skip
        assert r.exit_code == 0, r.output
        assert "misfits" in r.stdout and "tok/s" in r.stderr
        assert "[p. 1, chars " in r.stderr  # the quoted span, cited
        drafted, accepted = r.stderr.split("drafted/accepted ")[1].split("]")[0].split("/")
        assert int(drafted) >= int(accepted) > 0  # drafted first, as on the page
        r = run(
            "--url", url, "--api-key", KEY, "ask", doc_id, "What is this text about?", "--max-tokens", "8", "--direct"
        )
        assert r.exit_code == 0 and r.stdout.strip(), r.output  # "mode": "direct", accepted by the server
        r = run("ask", "nope", "x", "--url", url, "--api-key", KEY)
        assert r.exit_code != 0 and "no document with id" in r.stderr
        assert "list them with `docqa list`" in r.stderr and "GET /v1" not in r.stderr
        r = run("ingest", str(cases / "synthetic/png-renamed-to.pdf"), "--url", url, "--api-key", KEY)
        assert r.exit_code != 0 and "415" in r.stderr and "PNG" in r.stderr

        # status: the server (/health), then one document.
        srv = ("--url", url, "--api-key", KEY)
        r = run("status", *srv)
        assert r.exit_code == 0, r.output
        assert f"server   {url}: ok" in r.stdout and "n_ctx 8,192" in r.stdout and "documents 1: 1 ready" in r.stdout
        r = run("status", doc_id, *srv)
        assert r.exit_code == 0, r.output
        assert re.search(rf"^id +{doc_id}$", r.stdout, re.M) and re.search(r"^status +ready$", r.stdout, re.M)
        assert re.search(rf"^tokens +{tokens.group(1)}$", r.stdout, re.M)
        r = run("status", "0123456789abcdef", *srv)
        assert r.exit_code == 1 and "404: no document with id '0123456789abcdef'" in r.stderr

        # Errors in the CLI's words: --password, --pages.
        r = run("ingest", str(cases / LOCKED), *srv)
        assert r.exit_code == 1 and "give its password with --password" in r.stderr, r.output
        assert "form field" not in r.stderr
        r = run("ingest", str(cases / LOCKED), "--password", "not-it", *srv)
        assert r.exit_code == 1 and "check --password" in r.stderr, r.output
        r = run("ingest", str(cases / LONG_PDF), *srv)
        fits = re.search(r"ingest the part that fits with --pages 1-(\d+)", r.stderr)
        assert r.exit_code == 1 and "413: GeoTopo-komprimiert.pdf is too long" in r.stderr and fits, r.output
        assert "pages=" not in r.stderr
        # --pages and --chars: a part of the upload.
        r = run("ingest", str(cases / LONG_PDF), "--pages", "2", *srv)
        assert r.exit_code == 0, r.output
        part = r.stdout.strip().splitlines()[-1]
        assert "\t1 pages\t" in r.stderr
        r = run("ingest", str(cases / AGREEMENT), "--chars", "0-1200", *srv)
        assert r.exit_code == 0, r.output
        chars_part = r.stdout.strip().splitlines()[-1]
        names = {line.split("\t")[0]: line.split("\t")[-1] for line in run("list", *srv).stdout.splitlines()[1:]}
        assert names[part] == "GeoTopo-komprimiert.pdf (page 2)" or names[part].startswith("GeoTopo"), names
        assert names[chars_part].startswith("agreement-880-tokens.txt"), names
        r = run("ingest", str(cases / AGREEMENT), "--chars", "a lot", *srv)
        assert r.exit_code == 2 and "write it as --chars 0-50000" in r.stderr

        # delete: gone from the list; a second time, a 404 in the CLI's words.
        r = run("delete", part, chars_part, *srv)
        assert r.exit_code == 0 and r.stdout.split() == ["deleted", part, "deleted", chars_part], r.output
        assert part not in run("list", *srv).stdout
        r = run("delete", part, *srv)
        assert r.exit_code == 1 and f"404: no document with id '{part}'" in r.stderr and "`docqa list`" in r.stderr
    finally:
        server.stop()


@pytest.mark.parametrize(
    "args",
    [
        ("list",),
        ("ask", "0123456789abcdef", "Why?"),
        ("ingest", str(ROOT / "README.md")),
        ("status",),
        ("delete", "0123456789abcdef"),
    ],
    ids=["list", "ask", "ingest", "status", "delete"],
)
def test_no_server_is_one_line_naming_the_url(args):
    port = free_port()  # nothing listens there
    for r, url in [
        (run(*args, DOCQA_PORT=str(port)), f"http://127.0.0.1:{port}"),
        (run(*args, "--url", f"http://127.0.0.1:{port}/"), f"http://127.0.0.1:{port}"),
        (run(*args, DOCQA_URL=f"http://localhost:{port}"), f"http://localhost:{port}"),
    ]:
        assert r.exit_code == 1
        assert r.stdout == ""
        assert r.stderr.count("\n") == 1, r.stderr  # one line, no traceback
        assert r.stderr.startswith(f"Error: cannot reach a docqa server at {url} (")
        assert "start one with `docqa serve`" in r.stderr


def test_an_empty_question_is_named_not_the_usage():
    """`docqa ask ID ""` said "give DOC and QUESTION" although both were given."""
    for question in ("", "  "):
        r = run("ask", "0123456789abcdef", question)
        assert r.exit_code == 2 and "the QUESTION is empty" in r.stderr and "give DOC" not in r.stderr
    assert "give DOC and QUESTION" in run("ask", "0123456789abcdef").stderr


def test_a_malformed_url_is_named():
    r = run("list", "--url", "127.0.0.1:8000")
    assert r.exit_code == 1 and r.stderr.count("\n") == 1
    assert "'127.0.0.1:8000' is not a server URL" in r.stderr and "http://HOST:PORT" in r.stderr


def test_help_shows_where_the_server_is_found():
    r = run("--help")
    assert r.exit_code == 0
    text = " ".join(r.stdout.split())
    for needle in ("--url URL", "before or after the command", "DOCQA_URL", "DOCQA_HOST:DOCQA_PORT", "docqa serve"):
        assert needle in text, needle
    for command in ("ingest", "ask", "list", "status", "delete"):
        text = " ".join(run(command, "--help").stdout.split())
        assert "--url URL docqa server URL [default: DOCQA_URL, else http://DOCQA_HOST:DOCQA_PORT" in text, command
        assert "--api-key" in text and "DOCQA_API_KEY" in text, command
    text = " ".join(run("serve", "--help").stdout.split())
    assert "--host TEXT bind address [default: DOCQA_HOST" in text
    assert "--port INTEGER RANGE bind port [default: DOCQA_PORT" in text


@pytest.mark.parametrize(
    ("env", "url"),
    [
        ({}, "http://127.0.0.1:8000"),
        ({"DOCQA_PORT": "9000"}, "http://127.0.0.1:9000"),
        ({"DOCQA_HOST": "docs.example.org", "DOCQA_PORT": "80"}, "http://docs.example.org:80"),
        ({"DOCQA_HOST": "0.0.0.0"}, "http://127.0.0.1:8000"),  # bound to every address: connect locally
        ({"DOCQA_HOST": "::"}, "http://[::1]:8000"),
        ({"DOCQA_HOST": "::1", "DOCQA_PORT": "8001"}, "http://[::1]:8001"),  # IPv6 literals need brackets
        ({"DOCQA_URL": "https://qa.example.org", "DOCQA_PORT": "9000"}, "https://qa.example.org"),
    ],
)
def test_default_url(monkeypatch, env, url):
    for name in ("DOCQA_URL", "DOCQA_HOST", "DOCQA_PORT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert default_url() == url


@pytest.mark.parametrize(
    ("error_type", "message", "details", "words", "gone"),
    [
        ("document_not_found", "no document with id 'x'; list them with GET /v1/documents", {}, "`docqa list`", "GET"),
        ("password_required", "this PDF is encrypted; send its password in the `password` form field", {},
         "give its password with --password", "form field"),
        ("wrong_password", "the password is wrong for this encrypted PDF; send the right `password`", {},
         "check --password", "send the right"),
        ("document_too_long", "... upload it again with pages=1-13 ...",
         {"n_tokens": 57_000, "limit": 7_168, "estimated": True, "fits": {"pages": [1, 13]}},
         "about 57,000 tokens, at most 7,168 fit in one piece; ingest the part that fits with --pages 1-13", "pages="),
        ("document_too_long", "...",
         {"n_tokens": 9_000, "limit": 7_168, "estimated": False, "fits": {"chars": [0, 50]}},
         "9,000 tokens, at most 7,168 fit in one piece; ingest the part that fits with --chars 0-50", "about"),
        ("document_ingesting", "document x is still being ingested (40%); retry soon", {}, "`docqa status x`", None),
        ("document_failed", "document x has no stored text (failed)", {}, "`docqa delete x`", None),
        ("unauthorized", "this server needs an API key: send `Authorization: Bearer <key>`", {},
         "this server needs an API key: give it with --api-key KEY or DOCQA_API_KEY", "Authorization"),
        ("invalid_request", "max_tokens: must be at least 1", {}, "max_tokens: must be at least 1", None),
    ],
)  # fmt: skip
def test_api_errors_in_the_cli_s_words(error_type, message, details, words, gone):
    text = explain(error_type, message, details, About(doc="x", file="f.pdf"))
    assert words in text
    if gone:
        assert gone not in text
