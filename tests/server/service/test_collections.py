"""Collections (issue 30 item 3): questions across several documents, on the embedded model.

Three small documents of our own, each holding one fact among sentences of its own (a text file, an
EPUB whose second chapter is its second page, a Markdown file): each question is answered from the
document that holds its fact, and its citations name that document and the page of the fact.
One server (in-process: the real app, engine and model) is shared by the whole module, and the
documents are a few sentences each, so the module takes seconds of prefill, not minutes.
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest
from click.testing import CliRunner

from server.service.collection import NOT_FOUND
from testkit.live import LOCAL
from tests.conftest import make_settings, sse_events, upload
from tests.server.api.test_segments import make_epub

LIGHTHOUSE = (
    "Notes on the North Head light.\n\n"
    "The light stands on a rock at the end of the northern cape. Its lamp is lit at dusk and put out "
    "at dawn, and the glass is cleaned every morning.\n\n"
    "The keeper was Zebulon Quarry. The parrot of Zebulon Quarry was named Marigold.\n\n"
    "Storms close the path to the rock for several days each winter."
)
BAKERY_PAGES = [
    "A guide to the shops of the old town.\n\nThe shops open late on Sundays. The market square has a "
    "fountain and a clock that runs five minutes fast.",
    "The rye bread of the bakery on Tern Street is baked with caraway seeds.\n\n"
    "Its ovens are lit before four in the morning.",
]
FERRY = (
    "# Crossing the firth\n\n"
    "Boats leave from the west pier. Tickets are sold in the hut by the slipway, and dogs travel free.\n\n"
    "The ferry to Inchcolm is painted bright green.\n\n"
    "In fog the crossing is cancelled."
)
# (question, the document's name, the word the answer quotes, the page it is on). Asked to copy the
# sentence, the embedded model quotes it (asked "What was the parrot named?" it says "Marigold.",
# right but too short to cite: spec/cite.py cites runs of five words or more).
QUESTIONS = [
    ("Copy the sentence about the parrot of Zebulon Quarry.", "lighthouse.txt", "marigold", 1),
    ("Copy the sentence about the rye bread of the bakery on Tern Street.", "shops.epub", "caraway", 2),
    ("Copy the sentence about the ferry to Inchcolm.", "ferry.md", "green", 1),
]


def three_documents(client) -> dict[str, dict]:
    """Upload the three documents; name -> document."""
    files = {
        "lighthouse.txt": LIGHTHOUSE.encode(),
        "shops.epub": make_epub(BAKERY_PAGES),
        "ferry.md": FERRY.encode(),
    }
    docs = {name: upload(client, None, name=name, data=data) for name, data in files.items()}
    assert all(d["status"] == "ready" for d in docs.values()), docs
    assert docs["shops.epub"]["pages"] == 2
    return docs


@pytest.fixture(scope="module")
def client(tmp_path_factory, gemma_path):
    """The real app on the embedded model, one for the module."""
    from fastapi.testclient import TestClient

    from server.api.app import create_app

    settings = make_settings(tmp_path_factory.mktemp("collections") / "data", gemma_path)
    with TestClient(create_app(settings), base_url=LOCAL) as c:
        yield c


@pytest.fixture(scope="module")
def town(client) -> tuple[dict[str, dict], dict]:
    """The three documents and the collection of all three, "the town"."""
    docs = three_documents(client)
    r = client.post("/v1/collections", json={"name": "the town", "document_ids": [d["id"] for d in docs.values()]})
    assert r.status_code == 201, r.text
    return docs, r.json()


def ask(client, collection_id: str, question: str, **extra) -> dict:
    body = {"question": question, "max_tokens": 32, "verify16": True, **extra}
    r = client.post(f"/v1/collections/{collection_id}/answers", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_each_question_is_answered_from_the_document_that_holds_its_fact(client, town):
    docs, made = town
    assert [d["name"] for d in made["documents"]] == list(docs) and made["status"] == "ready"
    for question, name, words, page in QUESTIONS:
        doc = docs[name]
        answer = ask(client, made["id"], question)
        said = f"{question!r} -> {answer['answer']!r}, {answer['citations']}"
        used = answer["stats"]["segments"]
        assert [u["document_id"] for u in used] == [doc["id"]], said
        assert used[0]["document_name"] == name and used[0]["label"] == name, used
        assert words in answer["answer"].lower(), said
        assert answer["citations"], said
        assert {(c["document_id"], c["document_name"]) for c in answer["citations"]} == {(doc["id"], name)}, said
        quoting = [c for c in answer["citations"] if words in c["text"].lower()]
        assert quoting and all(c["page"] == page for c in quoting), said
        # The offsets are the document's own: its text at them is the quote.
        text = client.get(f"/v1/documents/{doc['id']}/text").json()["text"]
        assert all(text[c["start"] : c["end"]] == c["text"] for c in answer["citations"]), said

    # Nothing any document mentions: answered without the engine.
    none = ask(client, made["id"], "Who won the regatta?")
    assert none["answer"] == NOT_FOUND and none["stats"]["finish_reason"] == "not_found"
    assert none["citations"] == [] and none["stats"]["segments"] == []


def test_streamed_and_on_the_openai_route(client, town):
    docs, made = town
    # Streamed: the segment event names the document before its tokens; citations name it too.
    r = client.post(
        f"/v1/collections/{made['id']}/answers",
        json={"question": QUESTIONS[2][0], "max_tokens": 24, "verify16": True, "stream": True},
    )
    events = sse_events(r)
    kinds = [k for k, _ in events]
    assert kinds[0] == "queued" and kinds[1] == "segment" and kinds[-1] == "done", kinds
    assert events[1][1]["document_id"] == docs["ferry.md"]["id"]
    cited = next(d for k, d in events if k == "citations")["citations"]
    assert cited and all(c["document_name"] == "ferry.md" for c in cited)

    # The OpenAI route: model "collection:<id>", listed by GET /v1/models.
    models = client.get("/v1/models").json()["data"]
    card = next(m for m in models if m["id"] == f"collection:{made['id']}")
    assert card["name"] == "the town" and card["documents"] == [d["id"] for d in docs.values()]
    assert client.get(f"/v1/models/collection:{made['id']}").json()["name"] == "the town"
    r = client.post(
        "/v1/chat/completions",
        json={"model": f"collection:{made['id']}", "messages": [{"role": "user", "content": QUESTIONS[0][0]}],
              "max_tokens": 32, "verify16": True},
    )  # fmt: skip
    assert r.status_code == 200, r.text
    chat = r.json()
    assert "marigold" in chat["choices"][0]["message"]["content"].lower(), chat
    assert chat["citations"] and all(c["document_name"] == "lighthouse.txt" for c in chat["citations"])
    assert chat["docqa"]["segments"][0]["document_id"] == docs["lighthouse.txt"]["id"]


def test_the_cli_makes_and_asks_a_collection(client, town, monkeypatch):
    """``docqa collect`` and ``docqa ask --collection`` against the module's server (the CLI's HTTP
    client is the in-process app's TestClient, an httpx.Client)."""
    from server.tools import remote
    from server.tools.cli import main

    @contextmanager
    def here(_ctx, _url, _key):
        yield client

    monkeypatch.setattr(remote, "client", here)
    docs, made = town
    run = CliRunner().invoke
    ids = [docs["lighthouse.txt"]["id"], docs["shops.epub"]["id"]]
    r = run(main, ["collect", "cli pair", *ids])
    assert r.exit_code == 0, r.output
    pair = r.stdout.strip()
    assert "lighthouse.txt, shops.epub" in r.stderr and client.get(f"/v1/collections/{pair}").status_code == 200

    question, name, words, page = QUESTIONS[1]
    r = run(main, ["ask", "--collection", pair, question, "--max-tokens", "32", "--verify16"])
    assert r.exit_code == 0, r.output
    assert words in r.stdout.lower(), r.output
    assert f"[{name}, p. {page}, chars" in r.stderr and f"[answered from {name}]" in r.stderr, r.stderr

    r = run(main, ["ask", "--collection", "0123456789abcdef", "Hello?"])
    assert r.exit_code == 1 and "no collection with id '0123456789abcdef'" in r.output, r.output
    r = run(main, ["ask", "--collection", pair, made["id"], "Hello?"])
    assert r.exit_code == 2 and "only the QUESTION" in r.output, r.output
    r = run(main, ["collect", "ghosts", "0123456789abcdef"])
    assert r.exit_code == 1 and "'0123456789abcdef'" in r.output and "docqa list" in r.output, r.output
    assert client.delete(f"/v1/collections/{pair}").status_code == 204


def test_collection_routes_refuse_what_they_cannot_do(client, town):
    docs, _ = town
    ids = [d["id"] for d in docs.values()]
    r = client.post("/v1/collections", json={"name": "two", "document_ids": ids[:2]})
    assert r.status_code == 201, r.text
    two = r.json()

    r = client.post("/v1/collections", json={"name": " two ", "document_ids": ids})
    assert r.status_code == 409 and r.json()["error"]["type"] == "collection_exists", r.text
    assert r.json()["error"]["collection_id"] == two["id"]
    r = client.post("/v1/collections", json={"name": "ghosts", "document_ids": [ids[0], "0123456789abcdef", "x/y"]})
    error = r.json()["error"]
    assert r.status_code == 422 and error["type"] == "invalid_documents", r.text
    assert error["unknown"] == ["0123456789abcdef", "x/y"] and "'0123456789abcdef'" in error["message"]
    r = client.post("/v1/collections", json={"name": "none", "document_ids": []})
    assert r.status_code == 422
    r = client.post("/v1/collections", json={"name": "   ", "document_ids": ids})
    assert r.status_code == 422 and "name" in r.json()["error"]["message"]
    listed = [c["name"] for c in client.get("/v1/collections").json()["collections"]]
    assert sorted(listed) == ["the town", "two"], listed

    for path in ("/v1/collections/0123456789abcdef", "/v1/collections/no-such"):
        r = client.get(path)
        assert r.status_code == 404 and r.json()["error"]["type"] == "collection_not_found"
    r = client.post("/v1/collections/0123456789abcdef/answers", json={"question": "Hello?"})
    assert r.status_code == 404
    r = client.post(
        "/v1/chat/completions",
        json={"model": "collection:0123456789abcdef", "messages": [{"role": "user", "content": "Hello?"}]},
    )
    assert r.status_code == 404 and r.json()["error"]["type"] == "collection_not_found"

    # A document being read again (its row says so) is left out of its collections' answers, which
    # name it first (partial.unread), and cannot join a new one; with every member being read, or
    # asking while reading off, the collection is refused, naming one.
    store, settings = client.app.state.services.store, client.app.state.settings
    store.set_status(ids[0], "ingesting")
    try:
        question = "Copy the sentence about the rye bread of the bakery on Tern Street."
        answer = ask(client, two["id"], question, max_tokens=8)
        (unread,) = answer["partial"]["unread"]
        assert unread["document_id"] == ids[0] and unread["document_name"] == "lighthouse.txt", answer["partial"]
        assert 0 < answer["partial"]["share"] < 1 and answer["partial"]["read_through"] is None
        assert {u["document_name"] for u in answer["stats"]["segments"]} == {"shops.epub"}
        chat = {"model": f"collection:{two['id']}", "messages": [{"role": "user", "content": question}]}
        r = client.post("/v1/chat/completions", json=chat | {"max_tokens": 8})
        content = r.json()["choices"][0]["message"]["content"]
        assert r.status_code == 200 and content.startswith("_Not read yet: lighthouse.txt"), content
        assert client.get(f"/v1/collections/{two['id']}").json()["status"] == "ingesting"
        r = client.post("/v1/collections", json={"name": "busy", "document_ids": ids})
        assert r.status_code == 422 and r.json()["error"]["not_ready"] == [ids[0]], r.text
        store.set_status(ids[1], "ingesting")
        r = client.post(f"/v1/collections/{two['id']}/answers", json={"question": "Hello?"})
        assert r.status_code == 409 and r.json()["error"]["type"] == "document_ingesting", r.text
        assert "'lighthouse.txt'" in r.json()["error"]["message"]
        store.set_status(ids[1], "ready")
        settings.ask_while_reading = False
        r = client.post(f"/v1/collections/{two['id']}/answers", json={"question": "Hello?"})
        assert r.status_code == 409 and "'lighthouse.txt'" in r.json()["error"]["message"], r.text
    finally:
        settings.ask_while_reading = True
        store.set_status(ids[1], "ready")
        store.set_status(ids[0], "ready")

    r = client.delete(f"/v1/collections/{two['id']}")
    assert r.status_code == 204 and client.get(f"/v1/collections/{two['id']}").status_code == 404
    assert client.delete(f"/v1/collections/{two['id']}").status_code == 404
    assert all(client.get(f"/v1/documents/{i}").status_code == 200 for i in ids), "its documents stay"


def test_two_documents_that_rank_close_are_both_answered_naming_each(client, town, monkeypatch):
    """A question whose words two documents hold (with a close ratio that takes any second): both
    answer, each after "From <name>:", each part's citations naming its own document."""
    monkeypatch.setattr(client.app.state.settings, "segment_close_ratio", 0.01)
    _, made = town
    answer = ask(client, made["id"], "Zebulon Quarry parrot. Inchcolm ferry harbour.", max_tokens=16)
    names = [u["document_name"] for u in answer["stats"]["segments"]]
    assert sorted(names) == ["ferry.md", "lighthouse.txt"], answer["stats"]["segments"]
    assert [a["document_name"] for a in answer["answers"]] == names
    assert answer["answer"].startswith(f"From {names[0]}: ") and f"\n\nFrom {names[1]}: " in answer["answer"]
    for part in answer["answers"]:
        assert all(c["document_name"] == part["document_name"] for c in part["citations"]), part


def test_deleting_a_member_removes_it_and_its_answers(client):
    """Copies of their own (the module's other tests keep theirs), deleted one by one."""
    tag = "\n\nA second upload, for the deletion test."
    docs = {name: upload(client, None, name=name, data=(text + tag).encode())
            for name, text in (("lighthouse.txt", LIGHTHOUSE), ("ferry.md", FERRY))}  # fmt: skip
    made = client.post("/v1/collections", json={"name": "doomed", "document_ids": [d["id"] for d in docs.values()]})
    cid = made.json()["id"]

    assert client.delete(f"/v1/documents/{docs['ferry.md']['id']}").status_code == 204
    left = client.get(f"/v1/collections/{cid}").json()
    assert [d["name"] for d in left["documents"]] == ["lighthouse.txt"] and left["status"] == "ready"
    # The index is made again without it: its fact is in no document now (nothing else mentions
    # the ferry, so it is not found, without the engine).
    after = ask(client, cid, QUESTIONS[2][0])
    assert after["answer"] == NOT_FOUND and after["stats"]["segments"] == [], after
    # The other still answers.
    q, _, w, _ = QUESTIONS[0]
    assert w in ask(client, cid, q)["answer"].lower()

    assert client.delete(f"/v1/documents/{docs['lighthouse.txt']['id']}").status_code == 204
    emptied = client.get(f"/v1/collections/{cid}").json()
    assert emptied["documents"] == [] and emptied["status"] == "empty"
    r = client.post(f"/v1/collections/{cid}/answers", json={"question": q})
    assert r.status_code == 409 and r.json()["error"]["type"] == "collection_empty", r.text


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_a_collection_name_is_made_printable_on_both_stores(request, server, tmp_path, store):
    """A name holding NUL gave 500 on PostgreSQL (``text fields cannot contain NUL``); on SQLite it and
    RIGHT-TO-LEFT OVERRIDE were stored and shown as sent. Collection names are now made printable as
    document names are (store/docstore.py ``printable``), on both stores, and a name of nothing
    printable is refused like one of spaces."""
    url = request.getfixturevalue("postgres_url") if store == "postgres" else None
    with server(database_url=url) as client:
        doc = upload(client, None, name="ferry.md", data=FERRY.encode())
        for sent, shown in [("a\u0000b", "ab"), ("deed \u202eexe.pdf", "deed exe.pdf"), ("x\u200b\ty", "x y")]:
            r = client.post("/v1/collections", json={"name": sent, "document_ids": [doc["id"]]})
            assert r.status_code == 201, r.text
            assert r.json()["name"] == shown
            assert client.get(f"/v1/collections/{r.json()['id']}").json()["name"] == shown
        r = client.post("/v1/collections", json={"name": "\u0000\u202e\u200b", "document_ids": [doc["id"]]})
        assert r.status_code == 422 and "name" in r.json()["error"]["message"], r.text
