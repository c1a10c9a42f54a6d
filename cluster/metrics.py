"""Per-replica metrics on the ingress's /metrics.

Each reader replica writes its Prometheus text (server/api/metrics.py: TTFT, decode rate, queue depth,
drafted/accepted tokens, ...) to ``DATA_DIR/cluster/metrics/<replica>.prom`` every
:data:`PUBLISH_EVERY_S` (:class:`Publisher`); the ingress's /metrics adds the files of the last
:data:`MAX_AGE_S` to its own series, every sample labelled with its ``replica``, under the same
metric names as on one machine. Files and not calls, since a Serve handle cannot address one
replica; the directory is the shared one every replica mounts anyway.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client.core import Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from runtime.atomic import write_atomic

log = logging.getLogger("docqa.cluster")
PUBLISH_EVERY_S = 5.0
MAX_AGE_S = 60.0


def metrics_dir(data_dir: Path) -> Path:
    return Path(data_dir) / "cluster" / "metrics"


class Publisher:
    """A thread writing ``render()`` to this replica's file until stopped (then the file is removed)."""

    def __init__(self, data_dir: Path, replica: str, render: Callable[[], bytes]) -> None:
        self.path = metrics_dir(data_dir) / f"{''.join(c if c.isalnum() else '_' for c in replica)}.prom"
        self.replica, self.render = replica, render
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="docqa-metrics", daemon=True)

    def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.path.unlink(missing_ok=True)

    def _run(self) -> None:
        while True:
            try:
                write_atomic(self.path, f"# replica {self.replica}\n".encode() + self.render())
            except Exception:
                log.exception("could not publish this replica's metrics")
            if self._stop.wait(PUBLISH_EVERY_S):
                return


def gather(data_dir: Path, own: bytes, now: float | None = None) -> bytes:
    """The ingress's ``own`` metrics (``replica="ingress"``) and every reader's recent ones, merged by
    name (one HELP and TYPE each), every sample labelled with its ``replica``."""
    now = time.time() if now is None else now
    texts = [("ingress", own.decode())]
    for path in sorted(metrics_dir(data_dir).glob("*.prom")):
        try:
            if now - path.stat().st_mtime > MAX_AGE_S:
                continue
            text = path.read_text()
        except OSError:
            continue
        texts.append((text.splitlines()[0].removeprefix("# replica ") if text else path.stem, text))
    families: dict[str, Metric] = {}
    for replica, text in texts:
        for family in text_string_to_metric_families(text):
            merged = families.setdefault(family.name, Metric(family.name, family.documentation, family.type))
            for sample in family.samples:
                merged.samples.append(sample._replace(labels={**sample.labels, "replica": replica}))
    return generate_latest(_Families(list(families.values())))


class _Families:
    """A collector of already-built families, for generate_latest."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self):
        return self._families
