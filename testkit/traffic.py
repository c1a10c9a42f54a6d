"""Recorded traffic for ``docqa tune``: questions sent to a real server at their arrival times."""

from __future__ import annotations

import threading
import time

from testkit.live import Live


def record(server: Live, arrivals: list[tuple[float, str, dict]]) -> list[dict]:
    """Send each ``(offset_s, doc_id, body)`` at its offset from now, each in a thread of its own (the
    earlier answers need not be done); returns the answers' stats in arrival order."""
    results: list[dict] = [{} for _ in arrivals]
    t0 = time.monotonic()

    def ask(i: int, doc_id: str, body: dict) -> None:
        status, reply = server.post_json(f"/v1/documents/{doc_id}/answers", body, timeout=3600)
        assert status == 200, reply
        results[i] = reply["stats"]

    threads = []
    for i, (offset, doc_id, body) in enumerate(arrivals):
        time.sleep(max(0.0, t0 + offset - time.monotonic()))
        threads.append(threading.Thread(target=ask, args=(i, doc_id, body)))
        threads[-1].start()
    for t in threads:
        t.join()
    return results
