"""GET /metrics in Prometheus text format, scraped after real work."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import upload


def _scrape(client) -> dict[str, list]:
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {f.name: f.samples for f in text_string_to_metric_families(r.text)}


def _value(samples, name, **labels) -> float:
    return sum(s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def test_metrics_count_requests_ttft_tokens_drafts_and_snapshots(server, cases):
    with server() as client:
        doc = upload(client, cases / "pdf/pypdf-resources/crazyones.pdf")
        body = {"question": "Quote the whole text of the document verbatim.", "max_tokens": 40, "verify16": True}
        assert client.post(f"/v1/documents/{doc['id']}/answers", json=body).status_code == 200
        with client.stream("POST", f"/v1/documents/{doc['id']}/answers", json={**body, "stream": True}) as r:
            r.read()
        m = _scrape(client)
    assert (
        _value(
            m["docqa_http_requests"], "docqa_http_requests_total", route="/v1/documents/{doc_id}/answers", status="200"
        )
        == 2
    )
    assert _value(m["docqa_ttft_seconds"], "docqa_ttft_seconds_count") == 2
    assert _value(m["docqa_decode_tokens_per_second"], "docqa_decode_tokens_per_second_count") == 2
    assert _value(m["docqa_completion_tokens"], "docqa_completion_tokens_total") == 80
    drafted = _value(m["docqa_draft_tokens"], "docqa_draft_tokens_total", source="lookup")
    accepted = _value(m["docqa_accepted_draft_tokens"], "docqa_accepted_draft_tokens_total", source="lookup")
    assert drafted >= accepted > 0
    assert _value(m["docqa_snapshot_bytes"], "docqa_snapshot_bytes") > 1_000_000
    assert "docqa_engine_queue_depth" in m and "docqa_ingest_progress" in m
    assert _value(m["docqa_active_answers"], "docqa_active_answers") == 0
    assert _value(m["docqa_http_request_seconds"], "docqa_http_request_seconds_count") >= 4


def _ask(port: int, doc_id: str, body: dict):
    import json
    import socket

    payload = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.sendall(
        f"POST /v1/documents/{doc_id}/answers HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n".encode()
        + payload
    )
    return s


def test_hang_ups_without_a_stream_are_counted_and_end_their_handlers(tmp_path, gemma_path, cases):
    """One question at a time (DOCQA_N_SEQ_MAX=1): a long non-streaming answer runs, two more wait
    behind it, and all three clients hang up. The running one was counted as 200, the waiting ones
    never (their handlers waited forever for events that never came, so a SIGTERM logged "Cancel 2
    running task(s), timeout graceful shutdown exceeded"). All three are `cancelled`, the engine is
    free within a step, and the server stops cleanly."""
    import signal
    import time

    from testkit.live import Live

    server = Live(tmp_path / "data", gemma_path, DOCQA_N_SEQ_MAX="1")
    try:
        server.start()
        text = (cases / "text/gutenberg/alice-in-wonderland-pg11.txt").read_text(encoding="utf-8-sig")[:2000]
        doc_id = server.ingest("alice.txt", text.encode())
        long = {"question": "Tell me everything.", "max_tokens": 3000, "temperature": 2.0, "seed": 1, "stop": []}
        running = _ask(server.port, doc_id, {**long, "draft_tokens": 0})
        deadline = time.monotonic() + 60
        while server.get("/health")[1]["active_answers"] < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        waiting = [_ask(server.port, doc_id, {**long, "seed": i}) for i in (2, 3)]
        while server.get("/health")[1]["queue_depth"] < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert server.get("/health")[1]["queue_depth"] == 2
        for s in [*waiting, running]:
            s.close()
        route = "/v1/documents/{doc_id}/answers"
        while time.monotonic() < deadline:
            c = server.conn(10)
            c.request("GET", "/metrics")
            m = {f.name: f.samples for f in text_string_to_metric_families(c.getresponse().read().decode())}
            counted = {
                s.labels["status"]: s.value
                for s in m["docqa_http_requests"]
                if s.name == "docqa_http_requests_total" and s.labels["route"] == route
            }
            if sum(counted.values()) >= 3:
                break
            time.sleep(0.2)
        assert counted == {"cancelled": 3.0}, counted
        stop_by = time.monotonic() + 15  # the running answer leaves the batch at the engine's next step
        while (health := server.get("/health")[1])["active_answers"] and time.monotonic() < stop_by:
            time.sleep(0.1)
        assert health["active_answers"] == 0 and health["queue_depth"] == 0
        t0 = time.monotonic()
        server.stop(signal.SIGTERM)
        took = time.monotonic() - t0
    finally:
        server.stop()
    log = server.log.read_text()
    assert "graceful shutdown exceeded" not in log and "Cancel " not in log, log[-2000:]
    assert took < 10
