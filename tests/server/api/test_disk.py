"""Nothing fills the disk unnoticed and nothing on a full disk is lost: real servers whose data
directory is a small tmpfs the test fills (tests/smallfs.py; root, as in CI), the start-up sweep, and
the start-up errors for a missing or read-only data directory."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testkit.live import ROOT, Live
from tests import smallfs

MIB = 1024**2
ALICE = "text/gutenberg/alice-in-wonderland-pg11.txt"


@pytest.fixture
def small_live(tmp_path, gemma_path):
    """``small_live(size)``: a server whose data directory is on a ``size``-byte tmpfs of its own;
    returns (server, its data directory as the test sees it)."""
    smallfs.require()
    servers: list[Live] = []

    def start(size: int, **env) -> tuple[Live, Path]:
        mnt = tmp_path / f"mnt{len(servers)}"
        mnt.mkdir()
        server = Live(mnt / "data", gemma_path, DOCQA_SELFTEST="false", **env)
        server.argv = smallfs.command(size, mnt, [sys.executable, "-m", "server"])
        servers.append(server.start())
        return server, smallfs.inside(server.proc.pid, mnt / "data")

    yield start
    for s in servers:
        s.stop()


def _alice(cases, chars: int) -> bytes:
    return (cases / ALICE).read_text(encoding="utf-8-sig")[:chars].encode()


def _leftovers(data: Path, doc_id: str) -> list[str]:
    doc_dir = data / "documents" / doc_id
    stray = [p.name for p in data.rglob("*.tmp")]
    return stray + ([p.name for p in doc_dir.iterdir() if p.name.startswith("state")] if doc_dir.exists() else [])


def test_an_upload_the_disk_cannot_hold_is_refused_with_the_numbers(small_live, cases):
    server, data = small_live(96 * MIB)
    filler = smallfs.fill(data, leave=4 * MIB)
    status, body = server.upload("alice.txt", _alice(cases, 6000))
    print(f"507 on a full disk: {body['error']['message']}")
    assert status == 507 and body["error"]["type"] == "insufficient_storage"
    message = body["error"]["message"]
    assert "needs about" in message and "snapshot" in message and "MiB free" in message
    assert server.get("/v1/documents")[1]["documents"] == []  # nothing half-made
    filler.unlink()
    doc_id = server.ingest("alice.txt", _alice(cases, 6000))
    assert server.get(f"/v1/documents/{doc_id}/text")[0] == 200


@pytest.mark.slow  # one of the longest in make test (2 cores); its check stays in make test-slow
def test_a_full_disk_during_the_snapshot_fails_the_document_and_delete_still_works(small_live, cases):
    """The disk fills up while a document prefills: its snapshot write hits ENOSPC. The document ends
    ``failed`` with the reason (not ``ingesting`` forever), with no snapshot or temp file left; on the
    still-full disk DELETE works; with room again, the same bytes start over and become ready."""
    server, data = small_live(96 * MIB)
    text = _alice(cases, 24000)  # ~6k tokens: seconds of prefill
    status, doc = server.upload("alice.txt", text)
    assert status == 202, doc
    deadline = time.monotonic() + 120
    while server.get(f"/v1/documents/{doc['id']}")[1]["progress"] < 0.2 and time.monotonic() < deadline:
        time.sleep(0.05)
    filler = smallfs.fill(data)
    final = server.wait_ready(doc["id"])
    print(f"snapshot on a full disk: {final['status']}: {final['error']}")
    assert final["status"] == "failed" and "disk is full" in final["error"]
    assert _leftovers(data, doc["id"]) == []
    status, again = server.upload("alice.txt", text)  # still full: a clear 507, no phantom
    assert status == 507, again
    r = server.conn(10)
    r.request("DELETE", f"/v1/documents/{doc['id']}")
    assert r.getresponse().status == 204  # on the full disk
    assert not (data / "documents" / doc["id"]).exists()
    filler.unlink()
    status, fresh = server.upload("alice.txt", text)
    assert status == 202 and server.wait_ready(fresh["id"])["status"] == "ready"
    assert server.get(f"/v1/documents/{fresh['id']}/text")[0] == 200


STORE_NEW_ON_A_FULL_DISK = """
import json, shutil, sys
from pathlib import Path
sys.path.insert(0, {root!r})
from ingest import pipeline
from store import writes
from ingest.errors import DiskFull
from ingest.extract import ExtractedText
from store.sqlite_store import SqliteStore as DocStore
import numpy as np

data = Path(sys.argv[1])
store = DocStore(data)
filler = data / "filler.bin"
filler.write_bytes(bytes(shutil.disk_usage(data).free - 200_000))
upload = bytes(range(256)) * 2000  # 512 KB: more than is free
prepared = pipeline.Prepared(ExtractedText("hello"), np.arange(3, dtype=np.int32))
out = {{}}
try:
    writes.store_new(store, upload, "a" * 64, "big.txt", prepared)
except DiskFull as exc:
    out["error"] = str(exc)
out["rows"] = [(d.id, d.status, d.error) for d in store.list()]
out["files"] = sorted(str(p.relative_to(data)) for p in (data / "documents").rglob("*"))
out["tmp"] = sorted(p.name for p in data.rglob("*.tmp"))
filler.unlink()
doc, created = writes.store_new(store, upload, "a" * 64, "big.txt", prepared)
out["again"] = (doc.status, created, [d.id for d in store.list()] == [doc.id], len(store.read_upload(doc.id)))
print(json.dumps(out))
"""


def test_an_upload_write_that_hits_enospc_leaves_a_failed_row_and_no_files(tmp_path):
    """The upload write itself fails (the disk filled between the check and the write): the document
    is ``failed`` with the reason, nothing of it is on disk, and the same bytes start over."""
    smallfs.require()
    script = STORE_NEW_ON_A_FULL_DISK.format(root=str(ROOT))
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    run = subprocess.run(
        smallfs.command(4 * MIB, mnt, [sys.executable, "-c", script, str(mnt)]), capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    print(f"store_new on a full disk: {out}")
    assert "disk is full" in out["error"]
    [(_, status, error)] = out["rows"]
    assert status == "failed" and "disk is full" in error and "upload it again" in error
    assert out["files"] == [] and out["tmp"] == []
    assert out["again"] == ["ingesting", True, True, 512_000]


def test_startup_sweep_removes_orphans_and_reports_them(server, cases, tmp_path, caplog):
    data = tmp_path / "data"
    with server(data_dir=data) as client:
        assert client.get("/v1/documents").status_code == 200
    orphan = data / "documents" / "0123456789abcdef"
    orphan.mkdir()
    (orphan / "state.bin").write_bytes(bytes(1000))  # a snapshot whose row was deleted
    (data / f".docqa.sqlite3.{2**22 + 1}.tmp").write_bytes(bytes(10))  # a write that never finished
    with caplog.at_level(logging.WARNING, logger="docqa.store"), server(data_dir=data) as client:
        assert client.get("/v1/documents").status_code == 200
    assert not orphan.exists() and not list(data.glob("*.tmp"))
    [line] = [r.getMessage() for r in caplog.records if "start-up sweep" in r.getMessage()]
    assert "1010 bytes" in line and "0123456789abcdef" in line


def _start_fails(env: dict, argv_prefix: list[str] | None = None) -> str:
    """The last line ``python -m server`` prints when it refuses to start."""
    argv = [*(argv_prefix or []), sys.executable, "-m", "server"]
    env = {**env, "DOCQA_SELFTEST": "false"}
    run = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    return run.stderr.strip().splitlines()[-1]


def test_a_missing_or_read_only_data_directory_is_one_line_naming_it(tmp_path, gemma_path):
    import os

    env = {**os.environ, "DOCQA_MODEL_PATH": str(gemma_path)}
    missing = "/proc/docqa-missing/data"  # cannot be created, even by root
    line = _start_fails({**env, "DOCQA_DATA_DIR": missing})
    print(f"missing: {line}")
    assert line.startswith("docqa: ") and missing in line and "Traceback" not in line
    if smallfs.unavailable():
        (tmp_path / "ro").mkdir(mode=0o555)
        if os.geteuid() == 0:
            pytest.skip(f"a read-only directory needs a read-only mount as root: {smallfs.unavailable()}")
        read_only, prefix = tmp_path / "ro", None
    else:
        (tmp_path / "mnt").mkdir()
        read_only, prefix = tmp_path / "mnt", smallfs.command(MIB, tmp_path / "mnt", [], read_only=True)
    line = _start_fails({**env, "DOCQA_DATA_DIR": str(read_only)}, prefix)
    print(f"read-only: {line}")
    assert line.startswith("docqa: ") and str(read_only.resolve()) in line
    assert "Read-only file system" in line or "Permission denied" in line
