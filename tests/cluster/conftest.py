"""A real local Ray Serve cluster for the tests: the ingress and 2 reader replicas, each on 1 CPU
thread running the embedded model, sharing a data directory and a real PostgreSQL database.
One cluster for the whole session (starting one takes ~50 s on 2 cores); tests that stop or kill a
replica wait for Serve to bring it back before they return."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

READERS = 2
HOT_DOCS = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Cluster:
    url: str
    data_dir: Path
    database_url: str

    def client(self, **kw) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=httpx.Timeout(120.0), **kw)

    def kill(self, replica: str) -> None:
        """Kill the reader replica that answers as ``replica`` (``Reader#<id>`` in the stats), as a
        crash would: Serve notices and starts a new one."""
        import ray

        actor = f"SERVE_REPLICA::docqa#{replica}"  # Serve's name for the replica's actor (ReplicaID)
        ray.kill(ray.get_actor(actor, namespace="serve"), no_restart=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # until Ray has released the dead actor's name
            try:
                ray.get_actor(actor, namespace="serve")
            except ValueError:
                return
            time.sleep(0.2)
        raise AssertionError(f"{actor} still alive 30 s after ray.kill")

    def owner_of(self, doc_id: str) -> str | None:
        """The replica whose ingestion lease the document's row names (PostgreSQL, read directly)."""
        import psycopg

        with psycopg.connect(self.database_url) as db:
            row = db.execute("SELECT owner FROM documents WHERE id = %s", (doc_id,)).fetchone()
        return row[0] if row else None

    def wait_readers(self, n: int = READERS, timeout: float = 180.0) -> None:
        """Until Serve reports ``n`` running reader replicas (after a kill: Ray restarted it)."""
        from ray import serve

        deadline, healthy = time.monotonic() + timeout, 0
        while time.monotonic() < deadline:
            status = serve.status().applications.get("docqa")
            reader = status.deployments.get("Reader") if status is not None else None
            states = reader.replica_states if reader else {}
            ok = states.get("RUNNING", 0) >= n and sum(states.values()) == states.get("RUNNING", 0)
            healthy = healthy + 1 if ok else 0
            if healthy >= 3:  # three polls in a row: the controller has seen any recent death
                return
            time.sleep(0.5)
        raise AssertionError(f"{n} reader replicas not running after {timeout:.0f} s: {serve.status()}")


@pytest.fixture(scope="package")  # stopped after tests/cluster: an idle Ray still takes CPU from later tests
def cluster(tmp_path_factory: pytest.TempPathFactory, gemma_path: Path, postgres_server: str) -> Iterator[Cluster]:
    try:
        import ray  # noqa: F401
    except ImportError:
        if os.environ.get("DOCQA_REQUIRE_CLUSTER"):
            pytest.fail("Ray is not installed but DOCQA_REQUIRE_CLUSTER is set")
        pytest.skip("the cluster tests need the `cluster` extra (pip install -e '.[cluster]')")
    from tests.pg import fresh_database

    postgres_url = fresh_database(postgres_server)

    data_dir = tmp_path_factory.mktemp("cluster-data")
    env = {
        "DOCQA_DATA_DIR": str(data_dir),
        "DOCQA_DATABASE_URL": postgres_url,
        "DOCQA_MODEL_PATH": str(gemma_path),
        "DOCQA_N_THREADS": "1",
        "DOCQA_N_THREADS_BATCH": "1",
        # Room to spare around the ~5.7k-token document of the interrupted-ingestion test: a snapshot
        # is loaded into one contiguous run of free KV cells, which a fragmented cache may lack.
        "DOCQA_N_CTX": "16384",
        "DOCQA_N_SEQ_MAX": "2",
        "DOCQA_HOT_DOCS": str(HOT_DOCS),
        "DOCQA_INGEST_LEASE_S": "3",
        "DOCQA_EXTRACT_WORKERS": "1",
        "DOCQA_TRAFFIC_LOG": "false",
        "DOCQA_SHUTDOWN_TIMEOUT_S": "1",
        "DOCQA_HOST": "127.0.0.1",
    }
    from cluster import local

    # local.start sets the cluster's DOCQA_* variables in this process, where the ingress module reads
    # them; the replicas have their own copy (runtime_env). Put ours back at once, so the session's
    # other tests (which run after these, in the same process) do not inherit the cluster's settings.
    saved = dict(os.environ)
    # Serve kills a proxy that is not ready within 5 s three times running; on 2 cores beside other
    # work (load 6-10) its start took longer, and every cluster test failed at setup. Ray's processes
    # read these at their start.
    os.environ.setdefault("RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S", "60")
    os.environ.setdefault("RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S", "60")
    try:
        url = local.start(READERS, "127.0.0.1", _free_port(), env=env)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    try:
        yield Cluster(url, data_dir, postgres_url)
    finally:
        local.stop()


def wait_ready(client: httpx.Client, doc_id: str, timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        doc = client.get(f"/v1/documents/{doc_id}").json()
        if doc["status"] != "ingesting":
            return doc
        time.sleep(0.2)
    raise AssertionError(f"{doc_id} still ingesting after {timeout:.0f} s")


def text_document(n: int, paragraphs: int = 6) -> bytes:
    """A small distinct text document: numbered facts the model can copy."""
    lines = [f"# Report {n}"]
    for p in range(paragraphs):
        lines.append(
            f"Section {p + 1} of report {n}. The warehouse in district {n * 7 + p} stores {n * 100 + p} crates of "
            f"item {chr(65 + (n + p) % 26)}, counted on day {p * 3 + n}."
        )
    return "\n\n".join(lines).encode()


def ask(client: httpx.Client, doc_id: str, question: str, max_tokens: int = 8, retries: int = 20) -> dict:
    """A non-streamed answer at temperature 0; a 503 (a replica just died) is retried after its
    Retry-After, as a client should."""
    for _ in range(retries):
        r = client.post(
            f"/v1/documents/{doc_id}/answers",
            json={"question": question, "max_tokens": max_tokens, "temperature": 0},
        )
        if r.status_code != 503:
            break
        time.sleep(float(r.headers.get("retry-after", "1")))
    assert r.status_code == 200, r.text
    return r.json()


def upload(client: httpx.Client, data: bytes, name: str) -> dict:
    r = client.post("/v1/documents", files={"file": (name, data, "text/plain")})
    assert r.status_code in (200, 202), r.text
    return r.json()
