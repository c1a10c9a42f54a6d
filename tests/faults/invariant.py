"""The invariant after a crash and restart (docs/internals.md, "After a crash"), checked over every
document of a data directory by a real server that has just started on it.

* Every document is ``ready`` and answers the probe question from its saved state with the answer it
  gave before (greedy, DOCQA_BATCH_INVARIANT; one whose snapshot the disk budget evicted, as the
  server's log says, answers once it is prefilled again: its first question gets 409
  ``snapshot_missing``, "retry soon"), or ``ingesting`` and becomes ready (or failed with a
  reason) by itself, or ``failed`` with a reason.
* Nothing is half-made: no document or collection directory without its row, no ``ready`` or
  ``ingesting`` row without its upload, text and prefix (or segment list and segment prefixes), no
  snapshot state file without its manifest, no temp file of a dead writer.
* No upload acknowledged ``ready`` is lost: it is still there, and ``ready`` (failed only where a full
  disk kept its re-ingest from being stored, with the reason and its upload kept).
* The documents directory is within DOCQA_DISK_BUDGET_BYTES.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from testkit.live import Live

PROBE = {"question": "What is the first thing the document says?", "max_tokens": 8, "temperature": 0}
STATE_FILES = ("state.bin", "mtp.bin", "draft.bin")


@dataclass
class World:
    """What the loop was told: documents it saw ``ready`` (with their probe answer once asked) and those
    it deleted (204)."""

    ready: set[str] = field(default_factory=set)
    answers: dict[str, str] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)
    full_disk_reingests: set[str] = field(default_factory=set)


def documents(server: Live) -> dict[str, dict]:
    status, body = server.get("/v1/documents")
    assert status == 200, body
    return {d["id"]: d for d in body["documents"]}


def settle(server: Live, timeout: float = 180) -> dict[str, dict]:
    """The documents once none is ``ingesting`` (or at ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        docs = documents(server)
        if all(d["status"] != "ingesting" for d in docs.values()) or time.monotonic() > deadline:
            return docs
        time.sleep(0.2)


def check(server: Live, data: Path, world: World, budget: int | None, log: str = "") -> list[str]:
    """Every violation of the invariant (module docstring); [] when it holds. Records the probe
    answers of documents seen ready for the first time."""
    bad: list[str] = []
    docs = settle(server)
    for doc_id, d in docs.items():
        if d["status"] == "ingesting":
            bad.append(f"{doc_id} is still ingesting {180} s after the restart ({d['progress']:.0%})")
        elif d["status"] == "failed" and not d["error"]:
            bad.append(f"{doc_id} is failed without a reason")
        elif d["status"] not in ("ready", "failed"):
            bad.append(f"{doc_id} has status {d['status']!r}")
    for doc_id in sorted(world.ready - world.deleted):
        d = docs.get(doc_id)
        if d is None:
            bad.append(f"{doc_id} was acknowledged ready and is gone")
        elif d["status"] == "failed" and doc_id not in world.full_disk_reingests:
            bad.append(f"{doc_id} was acknowledged ready and is failed: {d['error']}")
    status, body = server.get("/v1/collections")
    collections = {c["id"] for c in body.get("collections", [])} if status == 200 else set()
    bad += files(data, docs, collections)
    bad += within_budget(data, budget)
    for doc_id, d in sorted(docs.items()):
        if d["status"] != "ready":
            continue
        status, body = server.post_json(f"/v1/documents/{doc_id}/answers", PROBE, timeout=120)
        if status == 409 and body.get("error", {}).get("type") == "snapshot_missing" and _evicted(log, doc_id):
            settle(server, 120)  # prefilled again, as an evicted document is when next asked about
            status, body = server.post_json(f"/v1/documents/{doc_id}/answers", PROBE, timeout=120)
        if status != 200:
            bad.append(f"{doc_id} is ready and its probe question got {status}: {json.dumps(body)[:300]}")
            continue
        world.ready.add(doc_id)
        before = world.answers.setdefault(doc_id, body["answer"])
        if body["answer"] != before:
            bad.append(f"{doc_id} answers {body['answer']!r} after the restart, {before!r} before")
    return bad


def _evicted(log: str, doc_id: str) -> bool:
    return any("evicted the snapshots of" in line and doc_id in line for line in log.splitlines())


def files(data: Path, docs: dict[str, dict], collections: set[str]) -> list[str]:
    """Half-made files: directories without a row, rows without their files, snapshots without a
    manifest, temp files left behind."""
    bad: list[str] = []
    kept = data / "collections"
    for p in sorted(kept.iterdir()) if kept.is_dir() else []:
        if p.is_dir() and p.name not in collections:
            bad.append(f"{p.name}: a collection directory without a row")
    root = data / "documents"
    dirs = {p.name for p in root.iterdir() if p.is_dir()} if root.is_dir() else set()
    bad += [f"{name}: a document directory without a row" for name in sorted(dirs - set(docs))]
    for doc_id, d in docs.items():
        if d["status"] == "failed":
            continue
        directory = root / doc_id
        for name in ("upload.bin", "text.json"):
            if not (directory / name).is_file():
                bad.append(f"{doc_id} is {d['status']} without its {name}")
        segments = directory / "segments.json"
        if segments.is_file():
            listed = json.loads(segments.read_text())
            keys = [directory / "segments" / str(s["index"]) for s in listed]
        else:
            keys = [directory]
        bad += [f"{doc_id}: {k.relative_to(root)} has no prefix.npy" for k in keys if not (k / "prefix.npy").is_file()]
    for state in [*root.glob("*/state.bin"), *root.glob("*/segments/*/state.bin")]:
        if not (state.parent / "state.json").is_file():
            bad.append(f"{state.relative_to(root)}: a snapshot without its manifest")
    bad += [f"{p.relative_to(data)}: a temp file left behind" for p in data.rglob("*.tmp")]
    return bad


def within_budget(data: Path, budget: int | None) -> list[str]:
    if budget is None:
        return []
    used = sum(p.stat().st_size for p in (data / "documents").rglob("*") if p.is_file())
    return [] if used <= budget else [f"the documents take {used} bytes, over DOCQA_DISK_BUDGET_BYTES {budget}"]
