"""Watched folders (DOCQA_WATCH): their documents kept in sync while the server runs, and after a
restart (server/api/folder_sync.py says what each file's document becomes).

At start, one full scan reads what changed while the server was down (a ``stat`` per file for the
rest), in DOCQA_WATCH_ORDER. Then watchfiles (https://github.com/samuelcolvin/watchfiles, Rust
``notify``: inotify on Linux) reports changes; a changed path is synced once it has stayed the same
(size and mtime) for DOCQA_WATCH_SETTLE_S, so a file being written or copied is read once, when it is
complete. A directory that appears (moved in) is scanned; one that goes takes its documents with it.
A full scan every DOCQA_WATCH_RESCAN_S catches what events miss (network file systems, an inotify
limit, events lost while a file was being read). All of it runs on the event loop as one task, each
file's reading and prefill awaited in turn (off the loop: worker process, threads, engine).
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from ingest.folder import ordered, state, under, walk_paths
from server.api.folder_sync import FolderSync

log = logging.getLogger("docqa.watch")
TICK_S = 0.25  # how often the changed paths are looked at
GONE_S = 1.0  # a path that went waits this much longer than one that changed (a rename's new path first)


class FolderWatch:
    """The watch of ``settings.watch`` for the app whose state is ``app_state`` (started by the
    lifespan once the engine is loaded)."""

    def __init__(self, app_state, settings) -> None:
        self.settings = settings
        self.roots = [Path(p).absolute() for p in settings.watch]
        self.sync = FolderSync(app_state, self.roots)
        self.pending: dict[str, tuple[float, str | None]] = {}  # path -> (last change seen, its stat key)
        self.scanned = asyncio.Event()  # the start-up scan is done (tests wait for it)
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task] = []

    def start(self) -> None:
        missing = [str(r) for r in self.roots if not r.is_dir()]
        for path in missing:
            log.error("DOCQA_WATCH names %s, which is not a folder: it is not watched (create it and restart)", path)
        self.roots = [r for r in self.roots if r.is_dir()]
        self.sync.roots = self.roots
        if not self.roots:
            self.scanned.set()
            return
        log.info("watching %s", ", ".join(map(str, self.roots)))
        self._tasks = [asyncio.create_task(self._events()), asyncio.create_task(self._run())]

    async def stop(self) -> None:
        self._stop.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _run(self) -> None:
        t0 = time.monotonic()
        n = await self.sync.full_scan()
        log.info("watched folders scanned in %.1f s: %d files read or removed", time.monotonic() - t0, n)
        self.scanned.set()
        last_scan = time.monotonic()
        while not self._stop.is_set():
            await asyncio.sleep(TICK_S)
            for path in self._settled():
                await self.sync.sync(Path(path))
            if time.monotonic() - last_scan >= self.settings.watch_rescan_s:
                await self.sync.full_scan()
                last_scan = time.monotonic()

    def _settled(self) -> list[str]:
        """The changed paths that have stayed the same for DOCQA_WATCH_SETTLE_S, in DOCQA_WATCH_ORDER
        (removed from ``pending``); a path still changing waits on. Files that are there come before
        files that went, which wait :data:`GONE_S` longer: a renamed or moved file's new path finds its
        document (by its bytes) before its old path would remove it."""
        now, ready, gone = time.monotonic(), [], []
        for path, (seen, key) in list(self.pending.items()):
            if now - seen < self.settings.watch_settle_s + (GONE_S if key is None else 0.0):
                continue
            root = under(self.roots, path)
            found = state(root, Path(path)) if root is not None else None
            if (found.key if found is not None else None) != key:
                self.pending[path] = (now, found.key if found is not None else None)  # still changing
                continue
            del self.pending[path]
            (ready if found is not None else gone).append(found or path)
        return [str(f.path) for f in ordered(ready, self.settings.watch_order)] + sorted(gone)

    async def _events(self) -> None:
        from watchfiles import Change, awatch

        try:
            async for changes in awatch(*self.roots, stop_event=self._stop, recursive=True):
                now = time.monotonic()
                for change, name in changes:
                    self._changed(Path(name), change == Change.deleted, now)
        except asyncio.CancelledError:
            raise
        except Exception:  # an inotify limit, a folder removed: the periodic scans go on
            log.exception("watching %s stopped; changes are found by the scans every %.0f s", self.roots,
                          self.settings.watch_rescan_s)  # fmt: skip

    def _changed(self, path: Path, deleted: bool, now: float) -> None:
        root = under(self.roots, str(path))
        if root is None:
            return
        if deleted or not path.exists():
            for known in self._known_under(path):  # the file, or every file of a folder that went
                self.pending[known] = (now, None)
            return
        for found in walk_paths(root, path):
            self.pending[str(found.path)] = (now, found.key)

    def _known_under(self, path: Path) -> list[str]:
        """``path`` and the watched files under it that have documents or were read."""
        prefix = str(path).rstrip("/") + "/"
        known = {str(path)} | set(self.sync.hashes)
        known |= {p for p in self._source_paths()}
        return [p for p in known if p == str(path) or p.startswith(prefix)]

    def _source_paths(self) -> list[str]:
        return [d.source_path for d in self.sync.store.list() if d.source_path]
