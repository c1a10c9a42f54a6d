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
* Watched folders (issue 49): no document holds a byte from outside the folder (a link and a hard link
  to a secret sit in it); no upload is changed by the folder (its text as first seen, no source path);
  nothing is lost when the folder goes away and comes back (each file's document keeps its id, and
  while the folder is away it is kept, marked ``folder_unavailable``).
"""

from __future__ import annotations

import hashlib
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
    uploads: dict[str, str] = field(default_factory=dict)  # upload id -> sha256 of its text as first seen ready
    folder_docs: dict[str, str] = field(default_factory=dict)  # watched file name -> its document's id
    folder_away: bool = False  # the watched folder is renamed away now
    secret: str = ""  # the text of the files outside the folder (linked into it): never in a document
    watched_files: tuple[Path, ...] = ()  # the watched files a check waits to see read (when changed)


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


def settle_watched(server: Live, world: World, timeout: float = 120) -> None:
    """Wait (at most ``timeout``) until the restarted server has read each watched file of
    ``world.watched_files`` as it is now (a document named by it, read after its last change): its
    start-up scan runs beside the first questions, which would otherwise probe the text before."""
    if world.folder_away or not world.watched_files:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        by_path = {d["source_path"]: d for d in documents(server).values() if d["source_path"]}
        if all(
            (d := by_path.get(str(p))) is not None
            and d["status"] != "ingesting"
            and (d["read_at"] or 0) >= p.stat().st_mtime - 1
            for p in world.watched_files
        ):
            return
        time.sleep(0.2)


def check(server: Live, data: Path, world: World, budget: int | None, log: str = "") -> list[str]:
    """Every violation of the invariant (module docstring); [] when it holds. Records the probe
    answers of documents seen ready for the first time."""
    bad: list[str] = []
    settle_watched(server, world)
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
    bad += watched(server, docs, world)
    for doc_id, d in sorted(docs.items()):
        if d["status"] != "ready":
            continue
        status, body = server.post_json(f"/v1/documents/{doc_id}/answers", PROBE, timeout=120)
        # The log as it is now: the disk worker may evict this snapshot during the check itself (another
        # document's re-ingest made room: seed 38's kill point #9), after ``log`` was read.
        missing = status == 409 and body.get("error", {}).get("type") == "snapshot_missing"
        if missing and _evicted(_log_now(server, log), doc_id):
            settle(server, 300)  # prefilled again, as an evicted document is when next asked about (>120 s at load 9)
            status, body = server.post_json(f"/v1/documents/{doc_id}/answers", PROBE, timeout=120)
        if status != 200:
            bad.append(f"{doc_id} is ready and its probe question got {status}: {json.dumps(body)[:300]}")
            continue
        world.ready.add(doc_id)
        before = world.answers.setdefault(doc_id, body["answer"])
        if body["answer"] != before:
            bad.append(f"{doc_id} answers {body['answer']!r} after the restart, {before!r} before")
    return bad


def watched(server: Live, docs: dict[str, dict], world: World) -> list[str]:
    """The watched-folder part of the invariant (module docstring); records the uploads and the folder's
    documents seen ready for the first time."""
    bad: list[str] = []
    texts = {}
    for doc_id, d in docs.items():
        if d["status"] != "ready":
            continue
        status, body = server.get(f"/v1/documents/{doc_id}/text")
        if status != 200:
            continue
        texts[doc_id] = body["text"]
        if world.secret and world.secret in body["text"]:
            bad.append(f"{doc_id} ({d['source_path'] or d['name']}) holds a file from outside the watched folder")
    for doc_id, digest in sorted(world.uploads.items()):
        d = docs.get(doc_id)
        if d is None:
            if doc_id not in world.deleted:
                bad.append(f"upload {doc_id} is gone, and the loop did not delete it")
            continue
        if d["source_path"] is not None:
            bad.append(f"upload {doc_id} was taken over by the watched file {d['source_path']}")
        if doc_id in texts and hashlib.sha256(texts[doc_id].encode()).hexdigest() != digest:
            bad.append(f"upload {doc_id} changed: its text is not the text it had")
    by_file = {d["source_path"].rsplit("/", 1)[-1]: d for d in docs.values() if d["source_path"]}
    for name, doc_id in sorted(world.folder_docs.items()):
        d = by_file.get(name)
        if d is None or d["id"] != doc_id:
            now = "none" if d is None else d["id"]
            bad.append(
                f"the watched file {name}'s document {doc_id} was lost (now {now}; folder away: {world.folder_away})"
            )
        elif world.folder_away and not d.get("folder_unavailable"):
            bad.append(f"{doc_id} ({name}) is not marked folder unavailable while its folder is away")
    for doc_id, d in docs.items():
        if d["status"] == "ready" and d["source_path"] is None and doc_id not in world.uploads and doc_id in texts:
            world.uploads[doc_id] = hashlib.sha256(texts[doc_id].encode()).hexdigest()
        if d["status"] == "ready" and d["source_path"]:
            world.folder_docs.setdefault(d["source_path"].rsplit("/", 1)[-1], doc_id)
    return bad


def _log_now(server: Live, log: str) -> str:
    """``log`` and the server's log file as it is now (when it has one)."""
    path = getattr(server, "log", None)
    try:
        return log + "\n" + path.read_text(errors="replace") if path is not None else log
    except OSError:
        return log


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
