"""One watched file brought in line with its document (:meth:`FolderSync.sync`), and a whole folder at
start-up (:meth:`FolderSync.full_scan`); server/api/watch.py decides when.

What a file's document becomes, by what the file is now (its row found by ``source_path``):

* **unchanged** (the size and mtime it had when read): left alone, not even read; a restart costs a
  ``stat`` per file.
* **touched** (another mtime, the same sha256): ``source_stat`` updated, not read again.
* **new**: ingested through the upload pipeline (server/api/uploads.py ``run``); ``source_path``,
  ``source_stat`` and ``read_at`` recorded.
* **changed**: its stored upload replaced and re-ingested in place, as a re-ingest does (the same id:
  collections and clients keep it).
* **the bytes of a document already there**: that document is linked (a file moved or renamed in the
  folder keeps its document, and is not read again).
* **gone** (deleted or moved out): its document is removed, as ``DELETE`` does, unless another file of
  the folder has its bytes, which it then names.
* **refused** (over DOCQA_MAX_UPLOAD_BYTES, unreadable, too long): a ``failed`` row with the refusal an
  upload would get, named in the document list; retried when the file changes.

One file at a time, and each document's prefill is awaited before the next file is read, so a folder
of a thousand files puts one ingestion at a time into the engine's queue, and questions go on next to
it (server/engine/scheduler.py). A file's extraction waits for a free extraction worker rather than
taking the 503 an upload would.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from ingest import pipeline
from ingest.errors import DocumentError, ExtractorBusy, StorageError
from ingest.extract import ExtractedText
from ingest.folder import FileState, TooLarge, ordered, read, scan, state, under
from runtime.atomic import write_atomic
from server.api import uploads
from server.api.guard import MULTIPART_SLACK
from store import writes
from store.docstore import FAILED, INGESTING, DocRecord, DuplicateDocument
from store.files import UPLOAD_FILE

log = logging.getLogger("docqa.watch")
POLL_S = 0.2  # how often a document's prefill is looked at while the next file waits
BUSY_RETRY_S = 1.0  # the extraction workers are all taken by uploads: try again after this


class FolderSync:
    """The documents of the watched folders ``roots`` (absolute), with the app's store, engine,
    settings and extraction worker (``app_state``: FastAPI's ``app.state``)."""

    def __init__(self, app_state, roots: list[Path]) -> None:
        self.app = app_state
        self.roots = [Path(r).absolute() for r in roots]
        self.hashes: dict[str, str] = {}  # path -> sha256 of its bytes when last read: copies, and moves

    @property
    def store(self):
        return self.app.store

    @property
    def engine(self):
        return self.app.engine

    @property
    def settings(self):
        return self.app.settings

    def rows(self) -> dict[str, DocRecord]:
        """The documents read from the watched folders, by ``source_path``."""
        return {d.source_path: d for d in self.store.list() if d.source_path and under(self.roots, d.source_path)}

    async def full_scan(self) -> int:
        """Sync every file of the folders that changed since it was read (all of them, the first time),
        in DOCQA_WATCH_ORDER, then every document whose file is gone. Returns the files synced."""
        files: list[FileState] = []
        for root in self.roots:
            files += await asyncio.to_thread(scan, root)
        rows = await asyncio.to_thread(self.rows)
        changed = [f for f in files if (r := rows.get(str(f.path))) is None or r.source_stat != f.key]
        for f in ordered(changed, self.settings.watch_order):
            await self.sync(f.path)
        present = {str(f.path) for f in files}
        gone = [Path(p) for p in rows if p not in present]
        for path in gone:
            await self.sync(path)
        return len(changed) + len(gone)

    async def sync(self, path: Path) -> None:
        """Bring ``path``'s document in line with the file (module docstring); never raises for the
        file's sake (a refusal is a failed row; anything else is logged)."""
        try:
            await self._sync(Path(path))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("watched file %s could not be synced", path)

    async def _sync(self, path: Path) -> None:
        root = under(self.roots, str(path))
        found = state(root, path) if root is not None else None
        row = await asyncio.to_thread(self._row, str(path))
        if found is None:
            if row is not None:
                await self._gone(row)
            return
        if row is not None and row.source_stat == found.key:
            return  # as it was when read: not even hashed
        limit = self.settings.max_upload_bytes - MULTIPART_SLACK  # what an upload's file may be (server/api/guard.py)
        try:
            data, found = await asyncio.to_thread(read, root, path, limit)
        except TooLarge as exc:
            message = (
                f"the file is {exc.size} bytes, larger than the upload limit of {exc.limit} bytes; split it, or "
                "raise DOCQA_MAX_UPLOAD_BYTES"
            )
            return await self._refuse(path, found, row, message)
        except FileNotFoundError:
            if row is not None:
                await self._gone(row)
            return
        except OSError as exc:
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
        """The file's bytes are document ``same``'s: a file moved here (its old path is gone), or a copy
        (``same`` keeps its own path). This path's earlier document, if another, goes."""
        if same.source_path is None or not Path(same.source_path).exists() or same.source_path == str(path):
            await asyncio.to_thread(self.store.set_source, same.id, str(path), found.key)
            log.info("%s is %s's bytes (moved or renamed): linked, not read again", path, same.id)
        if row is not None and row.id != same.id:
            await self._remove(row)

    async def _ingest(self, path: Path, data: bytes, digest: str, found: FileState, old: DocRecord | None) -> None:
        """A new document from the file (``old``: this path's failed row, replaced)."""
        known = await asyncio.to_thread(self.store.by_sha256, digest)  # a failed earlier attempt: replaced

        def store_doc(prepared: pipeline.Prepared) -> tuple[DocRecord, bool]:
            name = uploads.display_name(path.name, prepared.extracted)
            doc, created = writes.store_new(self.store, data, digest, name, prepared)
            if created:
                self.store.set_source(doc.id, str(path), found.key, time.time())
            return doc, created

        try:
            doc, _, _ = await uploads.run(
                self.engine, self.store, self.settings, self.app.snapshot_bytes, self._extractor(data), len(data),
                store_doc, replaces=known.id if known is not None else None,
            )  # fmt: skip
        except (DocumentError, StorageError) as exc:
            return await self._refuse(path, found, old, str(exc), digest)
        if old is not None and old.id != doc.id:
            await self._remove(old)
        log.info("%s read as document %s", path, doc.id)
        await self._prefilled(doc.id)

    async def _read_again(self, doc: DocRecord, path: Path, data: bytes, digest: str, found: FileState) -> None:
        """The file changed: the document's upload replaced, then re-ingested in place (its id stays)."""
        running: set[str] = self.app.reingesting
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
                self.engine, self.store, self.settings, self.app.snapshot_bytes, self._extractor(data), len(data),
                store_doc, replaces=doc.id,
            )  # fmt: skip
        except (DocumentError, StorageError) as exc:
            return await self._refuse(path, found, doc, str(exc))
        except DuplicateDocument:  # the new bytes arrived as another document meanwhile
            return await self._link(await asyncio.to_thread(self.store.by_sha256, digest), path, found, doc)
        finally:
            running.discard(doc.id)
        log.info("%s changed: document %s read again", path, doc.id)
        await self._prefilled(doc.id)

    async def _gone(self, row: DocRecord) -> None:
        """The file of ``row`` is gone: another watched file with its bytes takes it over, else it goes."""
        for other, digest in list(self.hashes.items()):
            if digest == row.sha256 and other != row.source_path:
                root = under(self.roots, other)
                found = state(root, Path(other)) if root is not None else None
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
        document, which becomes that row)."""
        key = found.key if found is not None else None
        log.info("%s refused: %s", path, message)
        if row is not None:
            await asyncio.to_thread(self.store.set_status, row.id, FAILED, message)
            await asyncio.to_thread(self.store.set_source, row.id, str(path), key, time.time())
            return
        digest = digest or pipeline.sha256(f"refused\0{path}\0{key}".encode())

        def record() -> None:
            try:
                doc = self.store.create(name=uploads.display_name(path.name, ExtractedText("")), sha256=digest,
                                        kind="", pages=0, tokens=0, chars=0)  # fmt: skip
            except DuplicateDocument as dup:  # the same refused bytes: one row, named by the first file
                if dup.existing.status == FAILED and dup.existing.source_path is None:
                    self.store.set_source(dup.existing.id, str(path), key, time.time())
                return
            self.store.set_status(doc.id, FAILED, message)
            self.store.set_source(doc.id, str(path), key, time.time())

        await asyncio.to_thread(record)

    async def _remove(self, doc: DocRecord) -> None:
        self.engine.forget(doc.id)
        await asyncio.to_thread(self.store.delete, doc.id)

    # -- helpers ----------------------------------------------------------------------------------------
    def _extractor(self, data: bytes):
        """The pipeline's extract callable: the extraction worker, waiting while uploads hold it all."""
        worker = self.app.extractor

        async def extract(cap: int) -> ExtractedText:
            while True:
                try:
                    return await worker.extract_async(data, None, None, cap)
                except ExtractorBusy:
                    await asyncio.sleep(BUSY_RETRY_S)

        return extract

    async def _prefilled(self, doc_id: str) -> None:
        """Wait until the document is no longer being prefilled (ready, failed or deleted)."""
        while True:
            doc = await asyncio.to_thread(self.store.get, doc_id)
            if doc is None or doc.status != INGESTING:
                return
            await asyncio.sleep(POLL_S)
