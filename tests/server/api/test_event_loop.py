"""No store call runs on the event loop: with PostgreSQL (the cluster setup) each one is a network
round trip that would stall every stream on the loop. Read from the source (an AST scan of every
``async def`` in server/api), and shown on a real server whose store sleeps on every row read while
20 answers stream."""

from __future__ import annotations

import ast
import threading
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[3]
#: DocStore methods that touch neither the rows nor the files.
NO_IO = {"share", "dir", "state_dir", "collection_dir"}
#: Calls whose arguments run in a worker thread, and calls that only keep a reference to the store.
OFF_LOOP, KEEPS = {"to_thread", "run_in_threadpool", "run_sync"}, {"bind"}


def _is_store(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id == "store") or (
        isinstance(node, ast.Attribute) and node.attr == "store"
    )


def _name(call: ast.Call) -> str:
    return call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")


def store_calls(fn: ast.AsyncFunctionDef) -> list[str]:
    """The calls in ``fn``'s own body (not in the functions defined in it) that read or write the
    store there: a store method other than :data:`NO_IO`, or a function given the store that is not
    awaited (an async one is scanned on its own), not sent to a thread, not a class being made."""
    found: list[str] = []

    def visit(node: ast.AST, awaited: ast.AST | None = None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue
            if isinstance(child, ast.Call) and _name(child) in OFF_LOOP:
                continue
            if isinstance(child, ast.Call):
                name, given = _name(child), [*child.args, *(k.value for k in child.keywords)]
                if isinstance(child.func, ast.Attribute) and _is_store(child.func.value) and name not in NO_IO:
                    found.append(f"line {child.lineno}: {ast.unparse(child)}")
                elif (
                    child is not awaited and any(map(_is_store, given)) and not name[:1].isupper() and name not in KEEPS
                ):
                    found.append(f"line {child.lineno}: {ast.unparse(child)}")
            visit(child, child.value if isinstance(child, ast.Await) else None)

    visit(fn)
    return found


def test_no_store_call_runs_inside_an_async_def_in_the_api():
    offenders = {}
    for path in sorted((ROOT / "server" / "api").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.AsyncFunctionDef) and (calls := store_calls(node)):
                offenders[f"{path.relative_to(ROOT)}:{node.name}"] = calls
    assert not offenders, offenders


def test_the_scan_finds_what_it_looks_for():
    """A scan that cannot fail is a defect: each kind of blocking call is found, and each way off the
    loop is not."""
    source = """
async def route(store, engine):
    a = store.get("x")
    b = existing_document(store, "x")
    c = engine.store.read_segments("x")
    d = await asyncio.to_thread(store.list)
    e = await submit(engine, store)
    store.share("me", 1.0)
    f = Engine(settings, store)
    def later():
        return store.list()
    g = await asyncio.to_thread(lambda: store.by_sha256("x"))
"""
    (fn,) = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.AsyncFunctionDef)]
    found = store_calls(fn)
    assert [line.split(":", 1)[1].strip() for line in found] == [
        "store.get('x')", "existing_document(store, 'x')", "engine.store.read_segments('x')"
    ], found  # fmt: skip


class SlowStore:
    """A store whose row reads each take ``delay_s`` (as a PostgreSQL round trip under load would), and
    that counts them; everything else is the real store's."""

    SLOW = ("get", "list", "by_sha256", "collection", "collections")

    def __init__(self, store, delay_s: float) -> None:
        self._store, self.delay_s, self.reads = store, delay_s, 0

    def __getattr__(self, name: str):
        attr = getattr(self._store, name)
        if name not in self.SLOW:
            return attr

        def slow(*args, **kwargs):
            self.reads += 1
            time.sleep(self.delay_s)
            return attr(*args, **kwargs)

        return slow


@pytest.fixture
def live_app(tmp_path, gemma_path, monkeypatch):
    """The real app served by uvicorn in a thread (so its event loop is real), with a SlowStore."""
    import uvicorn

    from server.api import app as app_module
    from testkit.live import free_port
    from tests.conftest import make_settings

    made: list[SlowStore] = []
    real_open = app_module.open_store

    def open_slow(*args, **kwargs) -> SlowStore:
        made.append(SlowStore(real_open(*args, **kwargs), 0.0))
        return made[-1]

    monkeypatch.setattr(app_module, "open_store", open_slow)
    settings = make_settings(tmp_path / "data", gemma_path, n_seq_max=4, sse_heartbeat_s=0.1)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app_module.create_app(settings), "127.0.0.1", port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the server did not start"
    try:
        yield f"http://127.0.0.1:{port}", made[0]
    finally:
        server.should_exit = True
        thread.join(60)


@pytest.mark.slow  # ~17 s on 2 cores: make test ran 20:34; the AST scan above keeps store calls off the event loop
def test_twenty_streams_do_not_stall_while_every_row_read_takes_three_seconds(live_app, cases):
    """Every row read takes 3 s while 20 answers stream, each asked through its document dependency,
    and GET /v1/documents, /v1/documents/{id}, /v1/collections and /v1/models are asked over and over
    meanwhile. With a row read on the event loop every stream would stop for 3 s at each (a frame
    comes at least every 0.1 s: heartbeats until the first token, then tokens); none stops for even
    2.5 s (a gap of about 1 s is a loaded 2-core machine's scheduling, not a store call)."""
    base, store = live_app
    text = (cases / "text/gutenberg/alice-in-wonderland-pg11.txt").read_text(encoding="utf-8-sig")[:2000]
    with httpx.Client(base_url=base, timeout=120) as client:
        doc_id = client.post("/v1/documents", files={"file": ("alice.txt", text.encode())}).json()["id"]
        deadline = time.monotonic() + 120
        while client.get(f"/v1/documents/{doc_id}").json()["status"] == "ingesting" and time.monotonic() < deadline:
            time.sleep(0.2)
    store.delay_s = 3.0
    gaps: list[float] = []
    done = threading.Event()

    def stream() -> None:
        body = {"question": "Who is the story about?", "stream": True, "max_tokens": 8, "draft_tokens": 0}
        with httpx.Client(base_url=base, timeout=180) as client:
            with client.stream("POST", f"/v1/documents/{doc_id}/answers", json=body) as r:
                assert r.status_code == 200
                last = None
                for line in r.iter_lines():  # queued, heartbeats until the first token, then tokens
                    if line in ("event: queued", ": keep-alive", "event: token"):
                        now = time.monotonic()
                        if last is not None:
                            gaps.append(now - last)
                        last = now
                    elif line.startswith("event: "):  # citations (off the engine thread), stats, done
                        assert line != "event: error", line
                        break

    def hammer() -> None:
        with httpx.Client(base_url=base, timeout=60) as client:
            while not done.is_set():
                for url in ("/v1/documents", f"/v1/documents/{doc_id}", "/v1/collections", "/v1/models"):
                    assert client.get(url).status_code == 200

    readers = [threading.Thread(target=hammer) for _ in range(4)]
    streams = [threading.Thread(target=stream) for _ in range(20)]
    reads = store.reads
    for t in readers + streams:
        t.start()
    for t in streams:
        t.join(300)
    done.set()
    for t in readers:
        t.join(60)
    worst = max(gaps)
    print(f"20 streams, row reads of 3 s ({store.reads - reads} meanwhile): widest gap between frames {worst:.2f} s")
    assert store.reads - reads >= 40, "the slow store was read while the answers streamed"
    assert len(gaps) > 20 * 8 and worst < 2.5, f"a stream stalled for {worst:.2f} s"
