"""The service room, between the engine and HTTP: the work the front doors share, with its
dependencies given explicitly as one :class:`Services` value made in the app's lifespan.

* question planning beyond one document: a segmented document's segments (``segmented.py``), a
  collection's documents (``collection.py``), whether two answers agree (``agreement.py``);
* intake: the upload pipeline (``uploads.py``), the pages-limited upload read in the background
  (``background.py``), documents read again for a larger context (``refit.py``);
* watched folders: the watch (``watch.py``) and the documents it keeps in sync (``folder_sync.py``).

Nothing here imports FastAPI or Starlette, nor the API room (tests/test_layers.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ingest.worker import ExtractionWorker
from server.config.settings import Settings
from server.engine.engine import Engine
from store.docstore import DocStore


@dataclass(slots=True)
class Services:
    """What intake, planning and watched folders work with, made once the engine is loaded.

    ``snapshot_bytes``: the estimated size of one document's saved state (bytes), for the free-space
    check before an upload is stored; ``reingesting``: ids of the documents being read again (one
    re-ingest per document at a time)."""

    settings: Settings
    store: DocStore
    engine: Engine
    extractor: ExtractionWorker
    snapshot_bytes: int
    reingesting: set[str] = field(default_factory=set)
