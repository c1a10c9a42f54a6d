"""The docqa CLI against a real server process."""

from __future__ import annotations

from click.testing import CliRunner

from bench.live import Live
from server.cli import main


def test_cli_ingest_list_ask(tmp_path, gemma_path, cases):
    server = Live(tmp_path / "cli", gemma_path).start()
    try:
        url = f"http://127.0.0.1:{server.port}"
        runner = CliRunner()
        pdf = cases / "pdf/pypdf-resources/crazyones.pdf"
        r = runner.invoke(main, ["--url", url, "ingest", str(pdf)])
        assert r.exit_code == 0, r.output
        doc_id = r.stdout.strip().splitlines()[-1]
        assert "prefill crazyones.pdf" in r.stderr and "270 tokens" in r.stderr
        r = runner.invoke(main, ["--url", url, "list"])
        assert r.exit_code == 0 and doc_id in r.stdout and "ready" in r.stdout
        r = runner.invoke(
            main,
            [
                "--url",
                url,
                "ask",
                doc_id,
                "Quote the whole text of the document verbatim.",
                "--max-tokens",
                "40",
                "--verify16",
            ],
        )
        assert r.exit_code == 0, r.output
        assert "misfits" in r.stdout and "tok/s" in r.stderr
        assert "[p. 1, chars " in r.stderr  # the quoted span, cited
        r = runner.invoke(main, ["--url", url, "ask", "nope", "x"])
        assert r.exit_code != 0 and "no document with id" in r.stderr
        r = runner.invoke(main, ["--url", url, "ingest", str(cases / "synthetic/png-renamed-to.pdf")])
        assert r.exit_code != 0 and "415" in r.stderr and "PNG" in r.stderr
    finally:
        server.stop()
