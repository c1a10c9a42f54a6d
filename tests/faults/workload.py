"""What the fault loop does to a server before it kills it: one phase per kill point, each started,
then the server killed at the kill point's place in it (``at``, 0..1), and what it acknowledged
recorded in the loop's World (tests/faults/invariant.py).

Phases (issue 37): ``extraction`` (a PDF upload in flight), ``prefill`` (a document's chunks, killed at
a share of its progress), ``snapshot`` (killed as soon as a snapshot's temp file or a state file
without its manifest shows, else when the document turns ready), ``reingest``, ``eviction`` (an
upload that the disk budget makes room for by evicting snapshots), ``collection`` (a collection made
and asked: its index built), ``questions`` (8 in flight, some streamed, some hung up on), ``folder``
(issue 49: the watched folder's file changed and killed while it is read again, the folder renamed away
and killed while it is gone (it comes back before the next phase), or an upload's bytes copied into it,
then changed or deleted).
"""

from __future__ import annotations

import http.client
import json
import os
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path

from testkit.live import Live
from tests.faults.invariant import World, documents

PHASES = ("extraction", "prefill", "snapshot", "reingest", "eviction", "collection", "questions", "folder")
SECRET = "The vault code is 4242, and only the night guard knows it."
FOLDER_FILES = ("f1.txt", "f2.txt")
QUESTIONS = ("Who is Alice?", "Quote the first sentence.", "What does the rabbit say?", "Where does she fall?")
MAX_DOCS = 5


class Workload:
    """Documents for the phases: ``text(serial, chars)`` a distinct text, ``pdf(serial)`` a distinct PDF."""

    def __init__(
        self, text: Callable[[int, int], bytes], pdf: Callable[[int], bytes], rng: random.Random, folder: Path
    ) -> None:
        self.text, self.pdf, self.rng = text, pdf, rng
        self.serial = 0
        self.hit: dict[str, int] = {}  # phase -> kills that landed inside it
        self.folder, self.away = folder, folder.with_name(folder.name + "-away")
        self.uploaded: dict[str, bytes] = {}  # upload id -> its bytes

    def setup_folder(self, world: World) -> None:
        """The watched folder (DOCQA_WATCH): two files, and a link and a hard link to a secret outside."""
        outside = self.folder.with_name("outside")
        self.folder.mkdir(parents=True, exist_ok=True)
        outside.mkdir(exist_ok=True)
        for name in FOLDER_FILES:
            (self.folder / name).write_bytes(self.text(self._next(), 600))
        (outside / "secret.txt").write_text(SECRET + "\n")
        (outside / "hard.txt").write_text(SECRET + " (a hard link)\n")
        os.symlink(outside / "secret.txt", self.folder / "leak.txt")
        os.link(outside / "hard.txt", self.folder / "hard.txt")
        world.secret = "vault code is 4242"
        world.watched_files = tuple(self.folder / name for name in FOLDER_FILES)

    def run(self, phase: str, at: float, server: Live, data: Path, world: World, kill: Callable[[], None]) -> None:
        """Start ``phase`` on ``server``, call ``kill()`` at its point ``at``; returns after the kill."""
        if world.folder_away:  # the folder that went away in the last phase comes back first
            self.away.rename(self.folder)
            world.folder_away = False
        self._make_room(server, world)
        landed = getattr(self, "_" + phase)(at, server, data, world, kill)
        if landed:
            self.hit[phase] = self.hit.get(phase, 0) + 1

    # -- phases: each returns whether the kill landed inside it ------------------------------------
    def _extraction(self, at, server, data, world, kill) -> bool:
        t = threading.Thread(target=_quietly, args=(server.upload, f"p{self._next()}.pdf", self.pdf(self.serial)))
        t.start()
        time.sleep(0.01 + 0.4 * at)
        inside = t.is_alive()
        kill()
        t.join(30)
        return inside

    def _prefill(self, at, server, data, world, kill) -> bool:
        doc_id = self._upload(server, self.text(self._next(), 2000))
        if doc_id is None:
            kill()
            return False
        _until(lambda: _doc(server, doc_id).get("progress", 1) >= at, 60)  # 1 when ready (or gone)
        inside = _doc(server, doc_id).get("status") == "ingesting"
        kill()
        return inside

    def _snapshot(self, at, server, data, world, kill) -> bool:
        doc_id = self._upload(server, self.text(self._next(), 800))
        if doc_id is None:
            kill()
            return False
        directory = data / "documents" / doc_id
        deadline, polls = time.monotonic() + 60, 0
        while time.monotonic() < deadline:
            if _writing_snapshot(directory):
                kill()
                return True
            polls += 1
            if polls % 50 == 0 and _doc(server, doc_id).get("status") != "ingesting":
                break
            time.sleep(0.002)
        time.sleep(0.1 * at)
        kill()
        return False

    def _reingest(self, at, server, data, world, kill) -> bool:
        ready = self._ready(server)
        if not ready:
            return self._prefill(at, server, data, world, kill)
        doc_id = self.rng.choice(ready)
        status, _ = _post(server, f"/v1/documents/{doc_id}/reingest", {})
        if status == 507 or (status == 202 and self._full_disk):
            world.full_disk_reingests.add(doc_id)
        inside = _until(lambda: _doc(server, doc_id).get("progress", 1) >= at, 30) and status == 202
        kill()
        return inside

    def _eviction(self, at, server, data, world, kill) -> bool:
        doc_id = self._upload(server, self.text(self._next(), 1200))
        if doc_id is not None:
            _until(lambda: _doc(server, doc_id).get("status") != "ingesting", 60 * at)
            if _doc(server, doc_id).get("status") == "ready":
                world.ready.add(doc_id)
        kill()
        return doc_id is not None

    def _collection(self, at, server, data, world, kill) -> bool:
        ready = self._ready(server)
        if len(ready) < 2:
            return self._snapshot(at, server, data, world, kill)
        members = self.rng.sample(ready, 2)
        status, made = _post(server, "/v1/collections", {"name": f"c{self._next()}", "document_ids": members})
        if status != 201:
            kill()
            return False
        t = threading.Thread(
            target=_quietly,
            args=(
                _post,
                server,
                f"/v1/collections/{made['id']}/answers",
                {"question": "Who is Alice?", "max_tokens": 8},
            ),
        )
        t.start()
        time.sleep(1.5 * at)
        inside = t.is_alive()
        kill()
        t.join(30)
        return inside

    def _questions(self, at, server, data, world, kill) -> bool:
        ready = self._ready(server)
        if not ready:
            return self._prefill(at, server, data, world, kill)
        threads = []
        for i in range(8):
            doc_id, question = self.rng.choice(ready), self.rng.choice(QUESTIONS)
            body = {"question": question, "max_tokens": 24, "stream": i % 3 == 0}
            hang_up = i % 4 == 1
            threads.append(threading.Thread(target=_quietly, args=(_ask, server, doc_id, body, hang_up)))
        for t in threads:
            t.start()
        time.sleep(0.2 + 2.5 * at)
        inside = any(t.is_alive() for t in threads)
        kill()
        for t in threads:
            t.join(30)
        return inside

    def _folder(self, at, server, data, world, kill) -> bool:
        how = self.rng.choice(("change", "vanish", "copy"))
        if how == "vanish":  # renamed away, killed while it is gone; back before the next phase
            self.folder.rename(self.away)
            world.folder_away = True
            time.sleep(0.3 + 2.5 * at)
            kill()
            return True
        if how == "change":
            name = self.rng.choice(FOLDER_FILES)
            doc_id = world.folder_docs.get(name)
            if doc_id is not None:
                world.answers.pop(doc_id, None)  # its text changes: so does its answer
                if self._full_disk:
                    world.full_disk_reingests.add(doc_id)
            (self.folder / name).write_bytes(self.text(self._next(), 600))
            time.sleep(0.2)
            inside = doc_id is not None and _until(lambda: _doc(server, doc_id).get("progress", 1) >= at, 15)
            inside = inside and _doc(server, doc_id).get("status") == "ingesting"
            kill()
            return inside
        uploads = [i for i in sorted(self.uploaded) if i in world.uploads and i not in world.deleted]
        if not uploads:
            return self._snapshot(at, server, data, world, kill)
        copy = self.folder / "copy.txt"
        world.folder_docs.pop("copy.txt", None)  # an earlier copy's own document is replaced (or removed)
        for doc_id, d in documents(server).items():
            if (d["source_path"] or "").endswith("/copy.txt"):
                world.deleted.add(doc_id)  # it may go (the upload's bytes) or be read again (new text)
                world.answers.pop(doc_id, None)
        copy.write_bytes(self.uploaded[self.rng.choice(uploads)])  # an upload's bytes, in the folder
        time.sleep(0.5 + at)
        if self.rng.random() < 0.5:
            copy.write_bytes(self.text(self._next(), 500))  # then changed: a document of the folder's own
        else:
            copy.unlink()  # or deleted
        time.sleep(1.5 * at)
        kill()
        return True

    # -- helpers ------------------------------------------------------------------------------------
    _full_disk = False

    def _next(self) -> int:
        self.serial += 1
        return self.serial

    def _upload(self, server: Live, data: bytes) -> str | None:
        try:
            status, body = server.upload(f"d{self.serial}.txt", data)
        except (OSError, ValueError):
            return None
        if status not in (200, 202):
            return None
        self.uploaded[body["id"]] = data
        return body["id"]

    def _ready(self, server: Live) -> list[str]:
        return sorted(i for i, d in documents(server).items() if d["status"] == "ready")

    def _make_room(self, server: Live, world: World) -> None:
        docs = documents(server)
        for doc_id, d in docs.items():
            if d["status"] == "ready":
                world.ready.add(doc_id)
        docs = {i: d for i, d in docs.items() if not d["source_path"]}  # the folder's stay: it owns them
        for doc_id in sorted(docs, key=lambda i: docs[i]["created_at"])[: max(0, len(docs) - MAX_DOCS + 1)]:
            c = server.conn(30)
            c.request("DELETE", f"/v1/documents/{doc_id}")
            if c.getresponse().status == 204:
                world.deleted.add(doc_id)


def _writing_snapshot(directory: Path) -> bool:
    try:
        names = [p.name for p in directory.rglob("*")]
    except OSError:
        return False
    if any(n.startswith(".state.") and n.endswith(".tmp") for n in names):
        return True
    return "state.bin" in names and "state.json" not in names


def _doc(server: Live, doc_id: str) -> dict:
    try:
        return server.get(f"/v1/documents/{doc_id}")[1]
    except (OSError, ValueError):
        return {}


def _post(server: Live, path: str, body: dict) -> tuple[int, dict]:
    try:
        return server.post_json(path, body, timeout=60)
    except (OSError, ValueError):
        return 0, {}


def _ask(server: Live, doc_id: str, body: dict, hang_up: bool) -> None:
    c = server.conn(60)
    c.request("POST", f"/v1/documents/{doc_id}/answers", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if hang_up:
        r.read(64)
        c.close()
    else:
        r.read()


def _quietly(fn, *args) -> None:
    try:
        fn(*args)
    except (OSError, ValueError, http.client.HTTPException):
        pass  # the server was killed under it: that is the point


def _until(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False
