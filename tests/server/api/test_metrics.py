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
