"""Bodies that cannot be parsed get a 422 naming why (server/api/parsing.py), on a real server process:
they were all a generic 400 "There was an error parsing the body" or "Invalid multipart data."."""

from __future__ import annotations

import json
import uuid

import pytest

from server.api.parsing import unparsable
from testkit.live import Live


@pytest.fixture(scope="module")
def served(tmp_path_factory, gemma_path):
    server = Live(tmp_path_factory.mktemp("parsing") / "data", gemma_path)
    try:
        yield server.start()
    finally:
        server.stop()


def _post(server: Live, path: str, body: bytes, content_type: str) -> tuple[int, dict]:
    c = server.conn(60)
    c.request("POST", path, body, {"Content-Type": content_type})
    r = c.getresponse()
    return r.status, json.loads(r.read())


def _form(filename: str, data: bytes, **fields: str) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode() for k, v in fields.items()
    ]
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n\r\n'.encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


@pytest.mark.parametrize(
    "body, named",
    [
        (b'{"question": "Who?", "seed": ' + b"7" * 5000 + b"}", "more than 4300 digits"),
        (b"[" * 5000 + b"]" * 5000, "nested too deeply"),
        (b'{"a": ' * 5000 + b"1" + b"}" * 5000, "nested too deeply"),
        (b'{"question": "caf\xe9?"}', "not valid UTF-8"),
        (b'{"question": "Who?', "not valid JSON (character 13: Unterminated string"),
    ],
)
def test_json_bodies_that_cannot_be_parsed_are_named(served, body, named):
    for path in ("/v1/documents/0123abcd/answers", "/v1/chat/completions"):
        status, reply = _post(served, path, body, "application/json")
        assert status == 422 and reply["error"]["type"] == "invalid_request", reply
        assert named in reply["error"]["message"], reply


def test_forms_that_cannot_be_parsed_are_named(served):
    body, kind = _form("n" * 5000 + ".txt", b"A short document about a parrot named Marigold.")
    status, reply = _post(served, "/v1/documents", body, kind)
    assert status == 422 and "most likely its file name" in reply["error"]["message"], reply
    boundary = uuid.uuid4().hex  # 50,000 header lines: the headers are named, not the file name
    lines = "".join(f"X-Line-{i}: x\r\n" for i in range(50_000))
    body = (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n{lines}\r\nhi\r\n'
            f"--{boundary}--\r\n").encode()  # fmt: skip
    status, reply = _post(served, "/v1/documents", body, f"multipart/form-data; boundary={boundary}")
    message = reply["error"]["message"]
    assert status == 422 and "too many header lines" in message and "file name" not in message, reply
    body, kind = _form("a.pdf", b"%PDF-1.4 not really", password="p" * 2_000_000)
    status, reply = _post(served, "/v1/documents", body, kind)
    assert status == 422 and "other than the file is too large" in reply["error"]["message"], reply
    body, kind = _form("a.txt", b"text")
    status, reply = _post(served, "/v1/documents", body[: len(body) // 2] + b"\r\n--x", kind.replace("boundary=", "b="))
    assert status == 422 and "not a readable multipart form" in reply["error"]["message"], reply
    # a name of 1,000 characters is taken, and shortened
    body, kind = _form("n" * 1000 + ".txt", b"A short document about a parrot named Marigold.")
    status, reply = _post(served, "/v1/documents", body, kind)
    assert status == 202 and len(reply["name"]) == 200, reply


def test_an_unknown_cause_is_left_to_the_generic_message():
    from starlette.exceptions import HTTPException

    try:
        try:
            raise KeyError("x")
        except KeyError as e:
            raise HTTPException(400, "There was an error parsing the body") from e
    except HTTPException as exc:
        assert unparsable(exc) is None
