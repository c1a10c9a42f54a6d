"""Browser fixtures: Debian's Chromium driven by Playwright, and one real docqa server for all page tests.

No browser is downloaded: Playwright launches the system Chromium (``DOCQA_CHROMIUM``, default
/usr/bin/chromium). Without it the tests skip, unless ``DOCQA_REQUIRE_BROWSER=1`` (set by .ci/run,
which installs chromium) makes that a failure. The server requires an API key, so every request the
page makes is checked to carry it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testkit.live import Live
from tests.web.pages import API_KEY, DocqaPage

CHROMIUM = os.environ.get("DOCQA_CHROMIUM", "/usr/bin/chromium")
# Flags for a closed network and a root user: no sandbox, no background traffic.
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="session")
def live(tmp_path_factory: pytest.TempPathFactory, gemma_path: Path, cases: Path) -> Iterator[Live]:
    """One server (embedded model, n_ctx 8192, DOCQA_API_KEY set) shared by every page test. Documents
    get 3,072 tokens of it (DOCQA_ANSWER_RESERVE 5120): the page tests' largest document is 1,748, and
    the part the page offers of an over-budget PDF is prefilled at ~270 tokens/s on 2 cores."""
    server = Live(
        tmp_path_factory.mktemp("web") / "data",
        gemma_path,
        DOCQA_API_KEY=API_KEY,
        DOCQA_LONG_DOCUMENTS="refuse",
        DOCQA_ANSWER_RESERVE="5120",
    ).start(timeout=600)  # the self-test and the cost calibration take minutes on a loaded 2-core machine
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def open_page(chromium, live: Live) -> Iterator[Callable[..., DocqaPage]]:
    """``open_page(width, height, key=API_KEY)``: a fresh browser context (own sessionStorage) on the page."""
    contexts = []

    def open_(width: int = 1280, height: int = 720, key: str | None = API_KEY) -> DocqaPage:
        context = chromium.new_context(viewport={"width": width, "height": height})
        contexts.append(context)
        if key is not None:  # as if the user had typed it into the API key field earlier in this tab
            context.add_init_script(f"sessionStorage.setItem('docqa.apiKey', {json.dumps(key)})")
        page = context.new_page()
        run = DocqaPage(page, width, height)
        page.on("pageerror", lambda exc: run.problems.append(f"page error: {exc}"))
        page.on("console", lambda msg: msg.type == "error" and run.problems.append(f"console: {msg.text}"))
        page.on("response", lambda r: r.status >= 400 and run.problems.append(f"HTTP {r.status} {r.url}"))
        page.goto(f"http://127.0.0.1:{live.port}/")
        page.wait_for_selector("#model-name:not(:text('…'))")
        return run

    yield open_
    for context in contexts:
        context.close()
