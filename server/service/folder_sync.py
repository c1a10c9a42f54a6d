"""One watched file brought in line with its document (:meth:`FolderSync.sync`), and a whole folder at
start-up and at each full scan (:meth:`FolderSync.full_scan`); server/service/watch.py decides when.

**A folder owns only the documents it made** (those with a ``source_path``). An uploaded document is
never changed, renamed or deleted by a folder: a watched file whose bytes are an upload's is a
*link* to it, kept in memory (``links``), and what then happens to the file (changed, deleted) is
never carried over to the upload.

What a file's document becomes, by what the file is now (its row found by ``source_path``):

* **unchanged** (the size and mtime it had when read): left alone, not even read; a restart costs a
  ``stat`` per file.
* **touched** (another mtime, the same sha256): ``source_stat`` updated, not read again.
* **new**: ingested through the upload pipeline (server/service/uploads.py ``run``); ``source_path``,
  ``source_stat`` and ``read_at`` recorded.
* **changed**: its stored upload replaced and re-ingested in place, as a re-ingest does (the same id:
  collections and clients keep it).
* **the bytes of a document of the folders**: that document is linked (a file moved or renamed in
  the folder keeps its document, and is not read again); a copy leaves it where it is.
* **the bytes of an uploaded document**: a link to the upload, nothing written (above); a restart
  reads and hashes the file once more to find that again.
* **gone** (deleted or moved out) **from a folder that is there**: its document is removed, as
  ``DELETE`` does, unless another file of the folder has its bytes, which it then names.
* **its folder unavailable** (gone, unreadable, or suddenly empty where its files were:
  ingest/folder.py ``unavailable``): nothing is removed; the folder is listed in ``missing`` (its documents show
  "folder unavailable") until it is back, and then synced like a restart: a file with the bytes it
  had keeps its document, id and collections. DOCQA_WATCH_GONE=delete restores the old rule
  (a folder that goes takes its documents with it).
* **refused** (over DOCQA_MAX_UPLOAD_BYTES, unreadable, a hard link, too long): a ``failed`` row with
  the refusal an upload would get, named in the document list; retried when the file changes. A
  ready document whose file cannot be read for a moment stays as it was, and is tried again.

One file at a time, and each document's prefill is awaited before the next file is read, so a folder
of a thousand files puts one ingestion at a time into the engine's queue, and questions go on next to
it (server/engine/scheduler.py). Between files, and while a prefill is awaited, ``interleave`` (the
watch's deletions) runs, so a deleted file's document does not wait behind a backlog of new ones. A
file's extraction waits for a free extraction worker rather than taking the 503 an upload would.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

from ingest import pipeline
from ingest.errors import DocumentError, ExtractorBusy, StorageError
from ingest.extract import ExtractedText
from ingest.folder import (
    Changed,
    FileState,
    HardLinked,
    TooLarge,
    device,
    ordered,
    printable_path,
    read,
    scan,
    state,
    unavailable,
    under,
)
from runtime.atomic import write_atomic
from server.service import Services, uploads
from server.service.uploads import MULTIPART_SLACK
from store import writes
from store.docstore import FAILED, INGESTING, READY, DocRecord, DuplicateDocument
from store.files import UPLOAD_FILE

log = logging.getLogger("docqa.watch")
POLL_S = 0.2  # how often a document's prefill is looked at while the next file waits
BUSY_RETRY_S = 1.0  # the extraction workers are all taken by uploads: try again after this


class FolderSync:
    """The documents of the watched folders ``roots`` (absolute), read through ``services``."""

    def __init__(self, services: Services, roots: list[Path]) -> None:
        self.services = services
        self.roots = [Path(r).absolute() for r in roots]
        self.hashes: dict[str, str] = {}  # path -> sha256 of its bytes when last read: copies, and moves
        self.links: dict[str, tuple[str, str]] = {}  # path -> (uploaded document id, stat key): an upload's bytes
        self.missing: dict[Path, str] = {}  # folder -> why it is unavailable (its documents are kept)
        self.devices: dict[Path, int] = {}  # folder -> the device it was on when last seen with files
        self.reported: set[str] = set()  # names that are not UTF-8, reported once each
        #: What runs between two files and while a prefill is awaited (server/service/watch.py: deletions).
        self.interleave: Callable[[], Awaitable[None]] | None = None
        self._interleaving = False

    @property
    def store(self):
        return self.services.store

    @property
    def engine(self):
        return self.services.engine

    @property
    def settings(self):
        return self.services.settings

    def rows(self) -> dict[str, DocRecord]:
        """The documents read from the watched folders, by ``source_path``."""
        return {d.source_path: d for d in self.store.list() if d.source_path and under(self.roots, d.source_path)}

    # -- whether a folder is there ----------------------------------------------------------------------
    async def available(self, root: Path, rows: Iterable[str] | None = None) -> bool:
        """Whether the folder ``root`` is there to sync with (ingest/folder.py ``unavailable``); records it
        in (or takes it out of) ``missing``. ``rows``: the source paths of the folders' documents (read
        from the store when None). Always True under DOCQA_WATCH_GONE=delete."""
        if self.settings.watch_gone == "delete":
            return True
        if rows is None:
            rows = await asyncio.to_thread(self.rows)
        kept = sum(under([root], p) is not None for p in rows)
        why = await asyncio.to_thread(unavailable, root, kept, self.devices.get(root))
        if why is not None:
            if self.missing.get(root) != why:
                log.warning("watched folder %s is unavailable: %s; its %d document(s) are kept, marked \"folder "
                            "unavailable\", until it is back", root, why, kept)  # fmt: skip
            self.missing[root] = why
            return False
        if self.missing.pop(root, None) is not None:
            log.info("watched folder %s is back: synced again (unchanged files keep their documents)", root)
        if kept and (dev := await asyncio.to_thread(device, root)) is not None:
            self.devices[root] = dev
        return True

    def unavailable_reason(self, source_path: str | None) -> str | None:
        """Why the folder of a document's ``source_path`` is unavailable, or None (there, or an upload)."""
        if not source_path or not self.missing:
            return None
        root = under(self.missing, source_path)
        return None if root is None else self.missing.get(root)

    def report(self, names: Iterable[str]) -> None:
        """Log each file name that is not UTF-8 once (surrogate-escaped): it is skipped."""
        for name in names:
            if name not in self.reported:
                self.reported.add(name)
                log.warning("%s: the file name is not valid UTF-8, so the file is skipped; rename it to read it", name)

    # -- syncing ------------------------------------------------------------------------------------------
    async def full_scan(self, roots: Iterable[Path] | None = None) -> int:
        """Sync every file of the folders (``roots``: these only) that changed since it was read (all of
        them, the first time), in DOCQA_WATCH_ORDER, then every document whose file is gone from a folder
        that is there (an unavailable folder, or a sub-folder that could not be listed, keeps its
        documents). Returns the files synced."""
        rows = await asyncio.to_thread(self.rows)
        files: list[FileState] = []
        scanned: list[Path] = []
        unknown: list[Path] = []
        for root in self.roots if roots is None else roots:
            if not await self.available(root, rows):
                continue
            found = await asyncio.to_thread(scan, root)
            self.report(found.bad_names)
            files += found.files
            unknown += found.unreadable
            scanned.append(root)
        changed = [f for f in files if self._changed(f, rows.get(str(f.path)))]
        for f in ordered(changed, self.settings.watch_order):
            await self.sync(f.path)
            await self._interleave()
        present = {str(f.path) for f in files}
        for path in [p for p in list(self.links) if under(scanned, p) is not None and p not in present]:
            del self.links[path]
        gone = [
            Path(p) for p in rows if p not in present and under(scanned, p) is not None and under(unknown, p) is None
        ]
        for path in gone:
            await self.sync(path)
        return len(changed) + len(gone)

    def _changed(self, f: FileState, row: DocRecord | None) -> bool:
        if row is not None:
            return row.source_stat != f.key
        linked = self.links.get(str(f.path))
        return linked is None or linked[1] != f.key

    async def sync(self, path: Path) -> None:
        """Bring ``path``'s document in line with the file (module docstring); never raises for the
        file's sake (a refusal is a failed row; anything else is logged)."""
        try:
            await self._sync(Path(path))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("watched file %s could not be synced", printable_path(path))

    async def sync_gone(self, path: Path) -> None:
        """:meth:`sync` for a path that went: only a removal (or nothing, when it is back or its folder
        is unavailable); never a read, so it may run while another file's prefill is awaited."""
        root = under(self.roots, str(path))
        if root is not None and await asyncio.to_thread(state, root, Path(path)) is not None:
            return  # back meanwhile: the next change or scan syncs it
        await self.sync(path)

    async def _sync(self, path: Path) -> None:
        root = under(self.roots, str(path))
        found = await asyncio.to_thread(state, root, path) if root is not None else None
        row = await asyncio.to_thread(self._row, str(path))
        if found is None:
            self.links.pop(str(path), None)
            if row is not None and root is not None and await self.available(root):
                await self._gone(row)
            return
        if row is not None and row.source_stat == found.key:
            return  # as it was when read: not even hashed
        if row is None and self.links.get(str(path), ("", ""))[1] == found.key:
            return  # an upload's bytes, as they were
        limit = self.settings.max_upload_bytes - MULTIPART_SLACK  # what an upload's file may be (server/api/guard.py)
        try:
            data, found = await asyncio.to_thread(read, root, path, limit, found)
        except Changed:
            return  # replaced since it was listed: its change is seen next
        except TooLarge as exc:
            message = (
                f"the file is {exc.size} bytes, larger than the upload limit of {exc.limit} bytes; split it, or "
                "raise DOCQA_MAX_UPLOAD_BYTES"
            )
            return await self._refuse(path, found, row, message)
        except HardLinked as exc:
            return await self._refuse(path, found, row, str(exc))
        except FileNotFoundError:
            if row is not None and await self.available(root):
                await self._gone(row)
            return
        except OSError as exc:
            if not await self.available(root):
                return  # the folder went while the file was read: kept
            if row is not None and row.status == READY:
                log.warning("%s could not be read (%s); its document %s stays as it was, and it is tried again",
                            path, exc.strerror, row.id)  # fmt: skip
                return
            return await self._refuse(
                path, found, row, f"the file could not be read ({exc.strerror}); check its permissions"
            )
        digest = pipeline.sha256(data)
        self.hashes[str(path)] = digest
        if row is not None and row.sha256 == digest:
            await asyncio.to_thread(self.store.set_source, row.id, str(path), found.key)  # touched, not changed
            return
        same = await asyncio.to_thread(self.store.by_sha256, digest)
        if same is not None and same.status != FAILED:
            await self._link(same, path, found, row)
        elif row is not None and row.status != FAILED:
            await self._read_again(row, path, data, digest, found)
        else:
            await self._ingest(path, data, digest, found, row)

    def _row(self, path: str) -> DocRecord | None:
        return next((d for d in self.store.list() if d.source_path == path), None)

    # -- what a file's document becomes ---------------------------------------------------------------
    async def _link(self, same: DocRecord, path: Path, found: FileState, row: DocRecord | None) -> None:
        """The file's bytes are document ``same``'s: an upload (linked, never taken over), a file of the
        folders moved here (its old path is gone), or a copy (``same`` keeps its own path). This path's
        earlier document, if another, goes."""
        self.links.pop(str(path), None)
        if same.source_path is None:
            self.links[str(path)] = (same.id, found.key)
            log.info("%s has the bytes of uploaded document %s: linked to it, which the folder never changes or "
                     "deletes", path, same.id)  # fmt: skip
        elif same.source_path == str(path) or not await asyncio.to_thread(self._exists, same.source_path):
            await asyncio.to_thread(self.store.set_source, same.id, str(path), found.key)
            log.info("%s is %s's bytes (moved or renamed): linked, not read again", path, same.id)
        if row is not None and row.id != same.id:
            await self._remove(row)

    def _exists(self, source_path: str) -> bool:
        root = under(self.roots, source_path)
        return root is not None and state(root, Path(source_path)) is not None

    async def _ingest(self, path: Path, data: bytes, digest: str, found: FileState, old: DocRecord | None) -> None:
        """A new document from the file (``old``: this path's failed row, replaced)."""
        known = await asyncio.to_thread(self.store.by_sha256, digest)  # a failed earlier attempt: replaced

        def store_doc(prepared: pipeline.Prepared) -> tuple[DocRecord, bool]:
            name = uploads.display_name(path.name, prepared.extracted)
            return writes.store_new(self.store, data, digest, name, prepared, (str(path), found.key, time.time()))

        try:
            doc, _, created = await uploads.run(
                self.engine, self.store, self.settings, self.services.snapshot_bytes, self._extractor(data), len(data),
                store_doc, replaces=known.id if known is not None else None,
            )  # fmt: skip
        except (DocumentError, StorageError) as exc:
            return await self._refuse(path, found, old, str(exc), digest)
        if not created:  # the same bytes were uploaded meanwhile: that upload's document, linked
            return await self._link(doc, path, found, old)
        if old is not None and old.id != doc.id:
            await self._remove(old)
        log.info("%s read as document %s", path, doc.id)
        await self._prefilled(doc.id)

    async def _read_again(self, doc: DocRecord, path: Path, data: bytes, digest: str, found: FileState) -> None:
        """The file changed: the document's upload replaced, then re-ingested in place (its id stays)."""
        running: set[str] = self.services.reingesting
        if doc.id in running:
            return  # a re-ingest of it runs: the next scan sees the file again
        running.add(doc.id)

        def store_doc(prepared: pipeline.Prepared) -> tuple[DocRecord, bool]:
            with self.store.holding(doc.id) as directory:
                write_atomic(directory / UPLOAD_FILE, data)
            self.store.set_upload(doc.id, uploads.display_name(path.name, prepared.extracted), digest)
            writes.store_again(self.store, doc, prepared)
            self.store.set_source(doc.id, str(path), found.key, time.time())
            return doc, True

        try:
            await uploads.run(
                self.engine, self.store, self.settings, self.services.snapshot_bytes, self._extractor(data), len(data),
                store_doc, replaces=doc.id,
            )  # fmt: skip
        except (DocumentError, StorageError) as exc:
            return await self._refuse(path, found, doc, str(exc))
        except DuplicateDocument:  # the new bytes arrived as another document meanwhile
            same = await asyncio.to_thread(self.store.by_sha256, digest)
            return await self._link(same, path, found, doc) if same is not None else None
        finally:
            running.discard(doc.id)
        log.info("%s changed: document %s read again", path, doc.id)
        await self._prefilled(doc.id)

    async def _gone(self, row: DocRecord) -> None:
        """The file of ``row`` (a document of the folders) is gone from a folder that is there: another
        watched file with its bytes takes it over, else it goes."""
        for other, digest in list(self.hashes.items()):
            if digest == row.sha256 and other != row.source_path:
                root = under(self.roots, other)
                found = await asyncio.to_thread(state, root, Path(other)) if root is not None else None
                if found is not None:
                    await asyncio.to_thread(self.store.set_source, row.id, other, found.key)
                    return
        self.hashes.pop(row.source_path or "", None)
        await self._remove(row)
        log.info("%s is gone: document %s removed", row.source_path, row.id)

    async def _refuse(
        self, path: Path, found: FileState | None, row: DocRecord | None, message: str, digest: str | None = None
    ) -> None:
        """The refusal an upload would get, as a ``failed`` row named by the file (``row``: this path's
        document, which becomes that row). A row of the same bytes that is not the folder's (an upload
        refused the same way) is left as it is."""
        key = found.key if found is not None else None
        log.info("%s refused: %s", path, message)
        if row is not None:
            await asyncio.to_thread(self.store.set_status, row.id, FAILED, message)
            await asyncio.to_thread(self.store.set_source, row.id, str(path), key, time.time())
            return
        digest = digest or pipeline.sha256(f"refused\0{path}\0{key}".encode())

        def record() -> None:
            try:
                name = uploads.display_name(path.name, ExtractedText(""))
                source = (str(path), key, time.time())
                doc = self.store.create(name=name, sha256=digest, kind="", pages=0, tokens=0, chars=0, source=source)
            except DuplicateDocument:  # the same refused bytes: one row, named by the first file (or the upload)
                return
            self.store.set_status(doc.id, FAILED, message)

        await asyncio.to_thread(record)

    async def _remove(self, doc: DocRecord) -> None:
        if doc.source_path is None:  # never an upload (module docstring)
            log.error("refusing to remove uploaded document %s for a watched file", doc.id)
            return
        self.engine.forget(doc.id)
        await asyncio.to_thread(self.store.delete, doc.id)

    # -- helpers ----------------------------------------------------------------------------------------
    async def _interleave(self) -> None:
        """Run ``interleave`` (the watch's deletions), once at a time."""
        if self.interleave is None or self._interleaving:
            return
        self._interleaving = True
        try:
            await self.interleave()
        finally:
            self._interleaving = False

    def _extractor(self, data: bytes):
        """The pipeline's extract callable: the extraction worker, waiting while uploads hold it all."""
        worker = self.services.extractor

        async def extract(cap: int) -> ExtractedText:
            while True:
                try:
                    return await worker.extract_async(data, None, None, cap)
                except ExtractorBusy:
                    await asyncio.sleep(BUSY_RETRY_S)
                    await self._interleave()

        return extract

    async def _prefilled(self, doc_id: str) -> None:
        """Wait until the document is no longer being prefilled (ready, failed or deleted), running
        ``interleave`` meanwhile."""
        while True:
            doc = await asyncio.to_thread(self.store.get, doc_id)
            if doc is None or doc.status != INGESTING:
                return
            await asyncio.sleep(POLL_S)
            await self._interleave()
