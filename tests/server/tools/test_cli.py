"""The docqa CLI: against a real server started with ``docqa serve --host --port``, and with no server."""

from __future__ import annotations

import re
import sys

import pytest
from click.testing import CliRunner

from server.tools.cli import default_url, main
from testkit.live import ROOT, Live, free_port

PDF = "pdf/pypdf-resources/crazyones.pdf"
KEY = "cli-test-key"
# Nothing from the test process's environment decides where the CLI connects, unless a test says so.
NO_ENV = {"DOCQA_URL": None, "DOCQA_HOST": None, "DOCQA_PORT": None, "DOCQA_API_KEY": None}


def run(*args: str, **env: str | None):
    return CliRunner(env={**NO_ENV, **env}).invoke(main, list(args))


def test_cli_against_a_real_server(tmp_path, gemma_path, cases):
    server = Live(tmp_path / "cli", gemma_path, DOCQA_API_KEY=KEY)
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
        assert f"{doc_id}\tready\t1\t{tokens.group(1)}\tcrazyones.pdf" in r.stdout
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

        r = run(
            "--url", url, "--api-key", KEY,
            "ask", doc_id, "Quote the whole text of the document verbatim.", "--max-tokens", "40", "--verify16",
        )  # fmt: skip
        assert r.exit_code == 0, r.output
        assert "misfits" in r.stdout and "tok/s" in r.stderr
        assert "[p. 1, chars " in r.stderr  # the quoted span, cited
        drafted, accepted = r.stderr.split("drafted/accepted ")[1].split("]")[0].split("/")
        assert int(drafted) >= int(accepted) > 0  # drafted first, as on the page
        r = run("ask", "nope", "x", "--url", url, "--api-key", KEY)
        assert r.exit_code != 0 and "no document with id" in r.stderr
        r = run("ingest", str(cases / "synthetic/png-renamed-to.pdf"), "--url", url, "--api-key", KEY)
        assert r.exit_code != 0 and "415" in r.stderr and "PNG" in r.stderr
    finally:
        server.stop()


@pytest.mark.parametrize(
    "args",
    [("list",), ("ask", "0123456789abcdef", "Why?"), ("ingest", str(ROOT / "README.md"))],
    ids=["list", "ask", "ingest"],
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
    for command in ("ingest", "ask", "list"):
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
