"""What a request passes before routing (server/api/guard.py): the Host check against DNS rebinding,
the Origin check against cross-site posts, the API key on every non-public path, the JSON
body limit, and request ids on 500s.

Most tests need no model: an app whose lifespan has not run answers 503 ``engine_unavailable`` from
a route, which shows that the request got past the guard; the DNS-rebinding test runs a real server
with a document."""

from __future__ import annotations

import logging

import pytest
from fastapi.testclient import TestClient

from server.api.app import create_app
from server.config.settings import Settings
from testkit.live import LOCAL
from tests.conftest import upload

CRAZY = "pdf/pypdf-resources/crazyones.pdf"
PASSED = 503  # got past the guard to a route (no engine without the lifespan)


def _client(tmp_path, base_url=LOCAL, **settings) -> TestClient:
    app = create_app(Settings(data_dir=tmp_path / "data", **settings))
    return TestClient(app, base_url=base_url, raise_server_exceptions=False)


def test_dns_rebinding_and_cross_site_form_posts_are_refused(server, cases):
    """Default settings (loopback, no key): a foreign Host can neither read nor delete a document, and
    a multipart form posted from another site's page (no preflight) uploads nothing."""
    with server() as client:
        doc = upload(client, cases / CRAZY)
        text_url = f"/v1/documents/{doc['id']}/text"
        rebind = {"Host": "rebind.attacker.example:8000"}
        r = client.get(text_url, headers=rebind)
        assert r.status_code == 403 and r.json()["error"]["type"] == "host_not_allowed"
        assert "rebind.attacker.example" in r.json()["error"]["message"]
        assert client.delete(f"/v1/documents/{doc['id']}", headers=rebind).status_code == 403
        assert client.get(text_url).status_code == 200  # still there; loopback names are served
        assert client.get(text_url, headers={"Host": "localhost:8000"}).status_code == 200

        before = len(client.get("/v1/documents").json()["documents"])
        form = {"file": ("x.txt", b"a document a page on another site sends")}
        r = client.post("/v1/documents", files=form, headers={"Origin": "http://evil.example"})
        assert r.status_code == 403 and r.json()["error"]["type"] == "origin_not_allowed"
        assert "DOCQA_CORS_ORIGINS" in r.json()["error"]["message"]
        r = client.post("/v1/documents", files=form, headers={"Sec-Fetch-Site": "cross-site"})
        assert r.status_code == 403
        assert len(client.get("/v1/documents").json()["documents"]) == before
        # The server's own page (same origin) and clients that send no Origin upload as before.
        r = client.post("/v1/documents", files=form, headers={"Origin": "http://127.0.0.1"})
        assert r.status_code == 202, r.text


@pytest.mark.parametrize(
    "settings, host, status",
    [
        ({}, "127.0.0.1:8000", PASSED),
        ({}, "[::1]:8000", PASSED),
        ({}, "LOCALHOST", PASSED),
        ({}, "docqa.example.org", 403),
        ({"allowed_hosts": ["docqa.example.org"]}, "docqa.example.org:8000", PASSED),
        ({"allowed_hosts": ["*.example.org"]}, "a.example.org", PASSED),
        ({"host": "0.0.0.0"}, "anything.example", PASSED),  # bound to every interface: names unknown
        ({"host": "0.0.0.0", "allowed_hosts": ["docqa.lan"]}, "anything.example", 403),
    ],
)
def test_host_names_served(tmp_path, settings, host, status):
    r = _client(tmp_path, **settings).get("/v1/documents", headers={"Host": host})
    assert r.status_code == status, r.text


@pytest.mark.parametrize(
    "origin, status",
    [
        ("http://127.0.0.1", PASSED),  # this server's own page
        ("http://evil.example", 403),
        ("null", 403),  # a sandboxed frame or a file: page
        ("https://app.example.org", PASSED),  # in DOCQA_CORS_ORIGINS
    ],
)
def test_state_changing_requests_from_other_origins(tmp_path, origin, status):
    client = _client(tmp_path, cors_origins=["https://app.example.org"])
    r = client.delete("/v1/documents/abc", headers={"Origin": origin})
    assert r.status_code == status, r.text
    assert client.get("/v1/documents", headers={"Origin": "http://evil.example"}).status_code == PASSED  # reads


@pytest.mark.parametrize(
    "path, public_metrics, status",
    [
        ("/metrics", False, 401),
        ("/metrics", True, 200),
        ("/docs", False, 401),
        ("/openapi.json", False, 401),
        ("/v1/documents", True, 401),
        ("/health", False, 200),
        ("/", False, 200),
        ("/static/app.css", False, 404),  # public (no such file), not 401
    ],
)
def test_with_a_key_only_the_page_and_health_are_public(tmp_path, path, public_metrics, status):
    client = _client(tmp_path, api_key="s3cret", public_metrics=public_metrics)
    r = client.get(path)
    assert r.status_code == status, r.text
    if status == 401:
        assert r.headers["www-authenticate"] == "Bearer"
        assert client.get(path, headers={"Authorization": "Bearer s3cret"}).status_code in (200, PASSED)


def test_json_bodies_have_a_limit_of_their_own(tmp_path):
    client = _client(tmp_path, max_json_bytes=4096)
    big = {"question": "q" * 10_000}
    r = client.post("/v1/documents/abc/answers", json=big)
    assert r.status_code == 413 and "DOCQA_MAX_JSON_BYTES" in r.json()["error"]["message"]
    assert r.headers["connection"] == "close"

    def chunks():  # no Content-Length: counted as it streams in
        yield b'{"question": "'
        for _ in range(10):
            yield b"q" * 1000
        yield b'"}'

    r = client.post("/v1/documents/abc/answers", content=chunks(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    assert client.post("/v1/documents/abc/answers", json={"question": "q"}).status_code == PASSED


def test_a_500_names_its_request_id_and_the_log_has_the_details(tmp_path, caplog):
    app = create_app(Settings(data_dir=tmp_path / "data"))

    @app.get("/v1/boom")
    async def boom() -> None:
        raise RuntimeError("secret detail /srv/docqa/data")

    client = TestClient(app, base_url=LOCAL, raise_server_exceptions=False)
    with caplog.at_level(logging.ERROR, logger="docqa.http"):
        r = client.get("/v1/boom")
    rid = r.headers["x-request-id"]
    assert r.status_code == 500 and r.json()["error"]["type"] == "internal_error"
    assert rid in r.json()["error"]["message"] and "secret" not in r.text
    logged = [rec for rec in caplog.records if rid in rec.getMessage()]
    assert logged and "secret detail" in str(logged[0].exc_info[1])
