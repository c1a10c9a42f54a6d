"""What a finished answer reports (server/engine/finish.py): its stats say when the machine was busy
(issue 39 item 6: "0.1 tok/s" on the page and in the CLI, with only the server's log saying why)."""

from __future__ import annotations

from runtime import system
from tests.conftest import upload

TEXT = b"The lighthouse keeper rowed to the mainland every Tuesday to buy lamp oil and bread.\n"


def _ask(client, doc_id: str) -> dict:
    r = client.post(f"/v1/documents/{doc_id}/answers", json={"question": "When did the keeper row?", "max_tokens": 8})
    assert r.status_code == 200, r.text
    return r.json()["stats"]


def test_the_stats_say_when_the_machine_is_busy(client, monkeypatch):
    doc = upload(client, None, name="keeper.txt", data=TEXT)  # ready
    monkeypatch.setattr(system.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(system.os, "getloadavg", lambda: (8.2, 7.0, 6.0))
    assert _ask(client, doc["id"])["busy"] == "load average 8.2 on 2 cores"
    monkeypatch.setattr(system.os, "getloadavg", lambda: (0.5, 0.5, 0.5))
    assert _ask(client, doc["id"])["busy"] is None
