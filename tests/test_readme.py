"""The README's snippets run as written (issue 29): every ``sh`` and ``python`` block is marked either
``<!-- readme-test: run -->`` or ``<!-- readme-test: skip (why) -->``, and the ``run`` ones are run, in
order, against a real server (``python -m server``) with the embedded Gemma on a free port, as a user
types them into one terminal: shell variables carry from one block to the next. Only the port is
rewritten (``127.0.0.1:8000`` and the CLI's default URL). The docs it links to exist, and docs/settings.md
describes every setting once and names no other.

The slow test asks the quick start's questions of the default model, as a new user would, and checks
that the answers are the README's own.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.live import Live

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MARKED_BLOCK = re.compile(r"<!-- readme-test: (run|skip \([^)]+\)) -->\n```(\w+)\n(.*?)\n```", re.S)
ANY_BLOCK = re.compile(r"^```(sh|python)\n", re.M)


def blocks(text: str) -> list[tuple[str, str, str]]:
    """``[(mark, language, code)]`` of every marked block, in order."""
    return [(m.group(1), m.group(2), m.group(3)) for m in MARKED_BLOCK.finditer(text)]


def test_every_snippet_is_marked_run_or_skip_with_a_reason():
    text = README.read_text()
    assert len(blocks(text)) == len(ANY_BLOCK.findall(text)), "a sh/python block without a readme-test mark"
    assert sum(mark == "run" for mark, _, _ in blocks(text)) >= 4


def test_linked_files_exist():
    for path in ("README.md", "ARCHITECTURE.md", *map(str, (ROOT / "docs").glob("*.md"))):
        text = (ROOT / path).read_text()
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            assert ((ROOT / path).parent / target).exists(), f"{path} links to {target}, which is missing"


SETTINGS_DOC = ROOT / "docs" / "settings.md"
#: Variables docs/settings.md may name that are no setting: the command-line client's.
CLIENT_VARIABLES = {"DOCQA_URL"}
VARIABLE = re.compile(r"\bDOCQA_[A-Z0-9_]+\b(?!\*)")  # a pattern such as DOCQA_DEBUG_* names none


def settings_tables(text: str) -> dict[str, list[str]]:
    """``{section title: [variable, ...]}``: the variables each ``##`` section's table rows name in their
    first cell, in order."""
    tables: dict[str, list[str]] = {}
    title = ""
    for line in text.splitlines():
        if line.startswith("## "):
            title = line[3:].strip()
        elif line.startswith("| `"):
            tables.setdefault(title, []).extend(VARIABLE.findall(line.split("|")[1]))
    return tables


def test_every_setting_is_documented_once_and_nothing_else():
    """docs/settings.md: every setting in exactly one table row, no variable that is not a setting (a
    deprecated old name or the client's excepted), the settings a user sets first (about twenty), and
    the DOCQA_DEBUG_* settings in the last section, alone."""
    from server.config.settings import Settings, deprecated_aliases

    text = SETTINGS_DOC.read_text()
    settings = [f"DOCQA_{name.upper()}" for name in Settings.model_fields]
    tables = settings_tables(text)
    rows = [name for names in tables.values() for name in names]
    missing = sorted(set(settings) - set(rows))
    assert not missing, f"docs/settings.md does not describe {missing}"
    twice = sorted({name for name in rows if rows.count(name) > 1})
    assert not twice, f"docs/settings.md describes {twice} in more than one row"
    unknown = set(VARIABLE.findall(text)) - set(settings) - set(deprecated_aliases()) - CLIENT_VARIABLES
    assert not unknown, f"docs/settings.md names {sorted(unknown)}, which are not settings"
    first, *_, last = tables
    assert first == "The settings you set" and 15 <= len(tables[first]) <= 25, (first, len(tables[first]))
    debug = [name for name in settings if name.startswith("DOCQA_DEBUG_")]
    assert sorted(tables[last]) == sorted(debug), f"the last section, {last!r}, must hold the DOCQA_DEBUG_* settings"


def _script(port: int) -> tuple[str, list[str]]:
    """The ``run`` blocks as one bash script (each shell block echoes a marker after it) and the Python
    blocks, both with the port rewritten."""
    shell, python = [], []
    for i, (mark, language, code) in enumerate(blocks(README.read_text())):
        if mark != "run":
            continue
        code = code.replace("127.0.0.1:8000", f"127.0.0.1:{port}")
        if language == "sh":
            shell.append(f"{code}\necho '<<block {i} done>>'")
        else:
            assert language == "python", language
            python.append(code)
    return "set -euo pipefail\n" + "\n".join(shell) + "\n", python


def run_readme(live: Live) -> tuple[str, list[str]]:
    """Runs the README's snippets against ``live``; returns the shell output and each Python block's."""
    script, python = _script(live.port)
    env = {**os.environ, "DOCQA_URL": f"http://127.0.0.1:{live.port}", "PYTHONPATH": str(ROOT)}
    env.pop("DOCQA_PORT", None)
    r = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, f"stdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}"
    outputs = []
    for code in python:
        p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, p.stderr[-3000:]
        outputs.append(p.stdout)
    return r.stdout, outputs


def _answers(shell_out: str) -> list[str]:
    """The ``answer`` of every non-streamed JSON answer the shell blocks printed."""
    # raw_decode: curl prints no newline after the body, so the next block's output may follow it
    decode = json.JSONDecoder().raw_decode
    return [decode(line)[0]["answer"] for line in shell_out.splitlines() if line.startswith('{"answer"')]


@pytest.fixture
def readme_server(tmp_path, gemma_path):
    if not (ROOT / ".venv" / "bin" / "docqa").exists():
        pytest.skip("the README's snippets call .venv/bin/docqa: run `make test`, which creates it")
    live = Live(tmp_path / "data", gemma_path).start(timeout=600)
    yield live
    live.stop()


def test_snippets_run_as_written(readme_server):
    out, python = run_readme(readme_server)
    blocks_run = [m for m, _, _ in blocks(README.read_text()) if m == "run"]
    assert out.count("done>>") == sum(lang == "sh" for m, lang, _ in blocks(README.read_text()) if m == "run")
    # an error body or event (a document's "error": null is fine)
    assert not re.search(r'"error":\s*\{|event: error', out), out
    assert _answers(out), out  # the curl answers came back as answers
    assert "event: token" in out and "event: done" in out  # the streamed one
    assert "ID\tSTATUS\tPAGES\tTOKENS\tREAD\tFOLDER\tNAME" in out  # docqa list
    assert all(p.strip() for p in python) and len(blocks_run) >= 4
    status, docs = readme_server.get("/v1/documents")
    assert status == 200 and {d["status"] for d in docs["documents"]} == {"ready"}


@pytest.mark.slow
def test_the_default_model_answers_the_quick_start(tmp_path, reader_model):
    """What a new user sees: the quick start's questions about the sample document, asked of the default
    model as `make serve` serves it (DOCQA_MODEL, so its answer mode: quote first), answered right."""
    from server.config.model import ModelSettings

    default = ModelSettings.model_fields["model"].default
    reader_model(default)  # skips, with the reason, where its parts are not installed
    env = {"DOCQA_MODEL_PATH": None, "DOCQA_MODEL": default, "DOCQA_ANSWER_HISTORY": None}
    live = Live(tmp_path / "data", Path("unused.gguf"), DOCQA_N_CTX="8192", **env).start(timeout=900)
    try:
        doc = live.ingest("harbour-guide.docx", (ROOT / "samples" / "harbour-guide.docx").read_bytes())
        for question, expected in [
            ("When does the first ferry to Morrow leave?", "07:40"),
            ("How long does the crossing to Morrow take?", "35 minutes"),
            ("Who was the last keeper of the Gull Point lighthouse?", "Ada Thorne"),
            ("Quote the sentence about the museum.", "net loft"),
        ]:
            status, answer = live.post_json(f"/v1/documents/{doc}/answers", {"question": question})
            assert status == 200, answer
            assert expected in answer["answer"] + ((answer.get("quote") or {}).get("text") or ""), (question, answer)
        absent = {"question": "Who is the director of the harbour museum?"}  # the guide names none
        assert live.post_json(f"/v1/documents/{doc}/answers", absent)[1]["answer"] == "The document does not say."
    finally:
        live.stop()
