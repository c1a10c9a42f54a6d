"""A damaged snapshot on a live server (issue 27 item 1): truncated (llama.cpp used to abort the whole
process on it), bytes overwritten (used to load and answer garbage), replaced by another document's
state. Each time the process survives, the question gets 409 snapshot_missing saying what was wrong,
the document is prefilled again from its stored text, and the next answer equals the one before the
damage. A real server process (testkit/live.py): an abort would take the test runner with it."""

from __future__ import annotations

import time

import pytest

from testkit.live import Live
from tests.ingest import damage

CRAZY = "pdf/pypdf-resources/crazyones.pdf"
TEXT = "synthetic/agreement-880-tokens.txt"
QUESTION = {"question": "Who are the crazy ones?", "max_tokens": 24}


@pytest.fixture
def server(tmp_path, gemma_path):
    # No RAM copies of states: every switch between the two documents restores from disk.
    live = Live(tmp_path / "data", gemma_path, DOCQA_SNAPSHOT_RAM_BYTES="0", DOCQA_SELFTEST="false").start()
    yield live
    live.stop()


def _ask(server: Live, doc: str) -> tuple[int, dict]:
    return server.post_json(f"/v1/documents/{doc}/answers", QUESTION)


def _until_answered(server: Live, doc: str, timeout: float = 180) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, body = _ask(server, doc)
        if status == 200:
            return body
        assert status == 409, body
        time.sleep(0.5)
    raise AssertionError(f"{doc} not answerable after {timeout} s")


@pytest.mark.parametrize(
    ("how", "damage_it", "said"),
    [
        ("truncated to half", lambda state, other: damage.truncate(state), "damaged"),
        # The same live-server flow for the other two detectors (10 s each on 2 cores), which
        # tests/ingest/test_snapshot.py tests without a server: in make test-slow.
        pytest.param(
            "4 KiB overwritten", lambda state, other: damage.overwrite(state), "damaged", marks=pytest.mark.slow
        ),
        pytest.param(
            "another document's state",
            lambda state, other: damage.replace_with(state, other),
            "damaged",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_a_damaged_snapshot_is_prefilled_again_and_never_served(server, cases, tmp_path, how, damage_it, said):
    crazy = server.ingest("crazyones.pdf", (cases / CRAZY).read_bytes())
    other = server.ingest("agreement.txt", (cases / TEXT).read_bytes())
    status, before = _ask(server, crazy)
    assert status == 200, before
    _ask(server, other)  # the document sequence now holds the other one: the next question restores from disk
    documents = tmp_path / "data" / "documents"
    damage_it(documents / crazy / "state.bin", documents / other / "state.bin")

    status, body = _ask(server, crazy)
    assert status == 409 and body["error"]["type"] == "snapshot_missing", (how, body)
    assert said in body["error"]["message"] and "prefilled again" in body["error"]["message"], body
    assert server.get("/health")[1]["status"] == "ok", "the process survived"
    after = _until_answered(server, crazy)
    assert after["answer"] == before["answer"], how
    assert server.get(f"/v1/documents/{crazy}")[1]["status"] == "ready"
    assert "damaged" in server.log.read_text()
