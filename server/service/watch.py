"""Watched folders (DOCQA_WATCH): their documents kept in sync while the server runs, and after a
restart (server/service/folder_sync.py says what each file's document becomes).

At start, one full scan reads what changed while the server was down (a ``stat`` per file for the
rest), in DOCQA_WATCH_ORDER. Then watchfiles (https://github.com/samuelcolvin/watchfiles, Rust
``notify``: inotify on Linux) reports changes; a changed path is synced once it has stayed the same
(size and mtime) for DOCQA_WATCH_SETTLE_S, so a file being written or copied is read once, when it is
complete. A directory that appears (moved in) is scanned; a sub-folder that goes takes its documents with
it (the watched folder itself going is another matter: below).
A full scan every DOCQA_WATCH_RESCAN_S catches what events miss (network file systems, an inotify
limit, events lost while a file was being read). All of it runs on the event loop as one task, each
file's reading and prefill awaited in turn (off the loop: worker process, threads, engine).

* **Deletions first**: a path that went is handled before the next new file is read, and while a
  file's prefill is awaited (``FolderSync.interleave``), so a deleted file's document stops being
  served within seconds however many new files wait.
* **The watcher never stays down**: watchfiles gives up on a batch of events when one name in it is
  not valid UTF-8 ("Unable to decode path"), and on other errors (a folder removed, an inotify
  limit); the watcher is then started again after :data:`RESTART_S`, the name reported once, and the
  folders scanned (at most every :data:`CATCH_UP_S`) for what the lost batch held. A watcher started
  again for any reason is followed by a scan :data:`RESTART_S` later: what changed while no watcher
  ran (a file deleted just as its folder came back) is found in seconds, not at the next full scan.
* **A folder that goes is not an instruction to delete** (server/service/folder_sync.py): while one is
  unavailable it is looked at every :data:`PROBE_S`, and synced again when it is back, with the
  watcher restarted on it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from ingest.folder import ordered, state, under, walk_paths
from server.service import Services
from server.service.folder_sync import FolderSync

log = logging.getLogger("docqa.watch")
TICK_S = 0.25  # how often the changed paths are looked at
GONE_S = 1.0  # a path that went waits this much longer than one that changed (a rename's new path first)
RESTART_S = 1.0  # the watcher stopped on an error: started again after this
CATCH_UP_S = 2.0  # the least time between two scans asked for by watcher errors
PROBE_S = 1.0  # how often an unavailable folder is looked at


class FolderWatch:
    """The watch of ``settings.watch``, working through ``services`` (started by the lifespan once the
    engine is loaded)."""

    def __init__(self, services: Services, settings) -> None:
        self.settings = settings
        self.roots = [Path(p).absolute() for p in settings.watch]
        self.sync = FolderSync(services, self.roots)
        self.sync.interleave = self._deletions
        self.pending: dict[str, tuple[float, str | None]] = {}  # path -> (last change seen, its stat key)
        self.scanned = asyncio.Event()  # the start-up scan is done (tests wait for it)
        self._stop = asyncio.Event()
        self._restart = asyncio.Event()  # the watcher is to start again (a folder came back)
        self._catch_up = False  # a watcher error lost events: scan soon
        self._catch_up_at = 0.0  # ... but not before this (monotonic): a restarted watcher is up by then
        self._errors: set[str] = set()  # watcher errors logged (each once)
        self._last_scan = self._last_probe = time.monotonic()
        self._watcher_stop: asyncio.Event | None = None  # the running watcher's stop event
        self._tasks: list[asyncio.Task] = []

    @property
    def missing(self) -> dict[Path, str]:
        """The unavailable folders and why (their documents are kept)."""
        return self.sync.missing

    def start(self) -> None:
        log.info("watching %s", ", ".join(map(str, self.roots)))
        self._tasks = [asyncio.create_task(self._events()), asyncio.create_task(self._run())]

    async def stop(self) -> None:
        self._stop.set()
        if self._watcher_stop is not None:  # the running watcher's thread returns at once (else it blocks the stop)
            self._watcher_stop.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _run(self) -> None:
        t0 = time.monotonic()
        try:
            n = await self.sync.full_scan()
            log.info("watched folders scanned in %.1f s: %d files read or removed", time.monotonic() - t0, n)
        except Exception:  # the store unreachable (PostgreSQL down): the next scan tries again
            log.exception("the start-up scan of the watched folders failed; it is tried again")
            self._catch_up = True
        self.scanned.set()
        self._last_scan = self._last_probe = time.monotonic()
        while not self._stop.is_set():
            await asyncio.sleep(TICK_S)
            try:
                await self._step()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # never the end of the watch: the next tick (and scan) tries again
                message = f"{type(exc).__name__}: {exc}"
                first = message not in self._errors
                self._errors.add(message)
                log.log(logging.ERROR if first else logging.DEBUG, "watching the folders failed for a moment "
                        "(%s); it goes on", message, exc_info=first)  # fmt: skip
                self._catch_up = True

    async def _step(self) -> None:
        """One tick: the deletions, then the files that settled, the folders that came back, a scan."""
        await self._deletions()
        for path in self._settled(gone=False):
            await self.sync.sync(Path(path))  # deletions run between files and during a prefill
            await self._deletions()
        now = time.monotonic()
        if self.sync.missing and now - self._last_probe >= PROBE_S:
            self._last_probe = now
            back = [r for r in list(self.sync.missing) if await self.sync.available(r)]
            if back:
                self._restart.set()
                await self.sync.full_scan(back)
        due = now - self._last_scan >= self.settings.watch_rescan_s
        if due or (self._catch_up and now >= self._catch_up_at and now - self._last_scan >= CATCH_UP_S):
            self._catch_up = False
            self._last_scan = time.monotonic()
            await self.sync.full_scan()
            self._last_scan = time.monotonic()

    async def _deletions(self) -> None:
        """Sync the paths that went and have settled (a removal, never a read)."""
        for path in self._settled(gone=True):
            await self.sync.sync_gone(Path(path))

    def _settled(self, gone: bool) -> list[str]:
        """The changed paths (``gone``: the ones that went) that have stayed the same for
        DOCQA_WATCH_SETTLE_S, in DOCQA_WATCH_ORDER (removed from ``pending``); a path still changing
        waits on. A path that went waits :data:`GONE_S` longer: a renamed or moved file's new path
        finds its document (by its bytes) before its old path would remove it."""
        now, ready, went = time.monotonic(), [], []
        for path, (seen, key) in list(self.pending.items()):
            if (key is None) != gone or now - seen < self.settings.watch_settle_s + (GONE_S if key is None else 0.0):
                continue
            root = under(self.roots, path)
            found = state(root, Path(path)) if root is not None else None
            if (found.key if found is not None else None) != key:
                self.pending[path] = (now, found.key if found is not None else None)  # still changing
                continue
            del self.pending[path]
            (ready if found is not None else went).append(found or path)
        if gone:
            return sorted(went)
        return [str(f.path) for f in ordered(ready, self.settings.watch_order)]

    async def _events(self) -> None:
        """Feed ``pending`` from watchfiles, starting the watcher again after an error or when a folder
        comes back (module docstring)."""
        from watchfiles import Change, awatch

        started = False
        while not self._stop.is_set():
            roots = [r for r in self.roots if r not in self.sync.missing and r.is_dir()]
            self._restart.clear()
            if not roots:
                await self._wait_restart(PROBE_S)
                continue
            if started:  # events between the last watcher's end and this one's start are lost: scan for them
                self._catch_up, self._catch_up_at = True, time.monotonic() + RESTART_S
            started = True
            stop = self._watcher_stop = asyncio.Event()
            relay = asyncio.create_task(self._relay_stop(stop))
            try:
                async for changes in awatch(*roots, stop_event=stop, recursive=True):
                    now = time.monotonic()
                    for change, name in changes:
                        self._changed(Path(name), change == Change.deleted, now)
                if not self._stop.is_set() and not self._restart.is_set():
                    await asyncio.sleep(RESTART_S)  # the watcher ended by itself
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a name that is not UTF-8, an inotify limit, a folder removed
                self._watcher_failed(exc)
                self._catch_up = True
                await self._wait_restart(RESTART_S)
            finally:
                relay.cancel()

    async def _relay_stop(self, stop: asyncio.Event) -> None:
        """Set ``stop`` (one watcher's) when the watch stops or the watcher is to start again."""
        waits = [asyncio.ensure_future(self._stop.wait()), asyncio.ensure_future(self._restart.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            stop.set()
        finally:
            for w in waits:
                w.cancel()

    async def _wait_restart(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._restart.wait(), seconds)
        except TimeoutError:
            pass

    def _watcher_failed(self, exc: BaseException) -> None:
        """Log a watcher error once (module docstring); a name that is not UTF-8 is a warning without a
        traceback, anything else an error with one."""
        leaves = list(exc.exceptions) if isinstance(exc, BaseExceptionGroup) else [exc]
        for leaf in leaves:
            message = f"{type(leaf).__name__}: {leaf}"
            if message in self._errors:
                continue
            self._errors.add(message)
            if "decode path" in str(leaf):
                log.warning("a file name in a watched folder is not valid UTF-8 (%s): it is skipped; file events go on "
                            "(rename the file to read it)", leaf)  # fmt: skip
            else:
                log.error("watching %s failed (%s); the watcher starts again, and a scan catches up", self.roots,
                          message, exc_info=leaf)  # fmt: skip

    def _changed(self, path: Path, deleted: bool, now: float) -> None:
        root = under(self.roots, str(path))
        if root is None:
            return
        if path == root:  # the folder itself went or came: its availability decides (folder_sync.py)
            self._catch_up = True
        if deleted or not path.exists():
            for known in self._known_under(path):  # the file, or every file of a folder that went
                self.pending[known] = (now, None)
            return
        for found in walk_paths(root, path):
            self.pending[str(found.path)] = (now, found.key)

    def _known_under(self, path: Path) -> list[str]:
        """``path`` and the watched files under it that have documents or were read."""
        prefix = str(path).rstrip("/") + "/"
        known = {str(path)} | set(self.sync.hashes) | set(self.sync.links)
        known |= {p for p in self._source_paths()}
        return [p for p in known if p == str(path) or p.startswith(prefix)]

    def _source_paths(self) -> list[str]:
        return [d.source_path for d in self.sync.store.list() if d.source_path]
