"""Driving the docqa page in Playwright: upload, ask, and check that what a person needs is on screen."""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from playwright.sync_api import Error as PlaywrightError

from testkit.live import ROOT

ARTIFACTS = ROOT / "tests" / "artifacts"  # git-ignored; CI keeps them
API_KEY = "page-test-key"
PDF = "pdf/pypdf-resources/crazyones.pdf"  # 1 page, about 260 prefix tokens with the embedded model
# A question answered by quoting: verify16 accepts most drafts, so it is fast on a CPU too, and a fixed
# window gives the same greedy answer every run (an adaptive one changes the rows per decode call, which
# moves Q4 logits a little).
QUOTE = "Quote the whole text of the document verbatim."
# An answer's statistics but "Machine busy", which a loaded test machine adds (runtime/system.py busy).
OWN_STATS = "#stats dd:not([data-stat='busy'])"

# The element under a point of `el` (the middle of its first line box, clipped to the viewport):
# null when that is `el` or inside it, else what covers it. A click there would land on that.
_COVERED_BY = """(el) => {
  const r = el.getClientRects()[0] || el.getBoundingClientRect();
  const top = Math.max(r.top, 0), bottom = Math.min(r.bottom, innerHeight);
  const hit = document.elementFromPoint(r.left + r.width / 2, (top + bottom) / 2);
  return hit && (hit === el || el.contains(hit)) ? null : (hit ? hit.outerHTML.slice(0, 160) : 'nothing');
}"""

# Texts an element showed over time, even ones replaced within the same task.
_RECORD_TEXTS = """([selector, name]) => {
  const node = document.querySelector(selector);
  const seen = window[name] = [node.textContent];
  new MutationObserver((records) => {
    for (const r of records) for (const n of r.addedNodes) seen.push(n.textContent);
    seen.push(node.textContent);
  }).observe(node, {childList: true, subtree: true, characterData: true});
}"""


@dataclass
class DocqaPage:
    page: object  # playwright.sync_api.Page
    width: int
    height: int
    problems: list[str] = field(default_factory=list)  # page errors, console errors, HTTP >= 400

    def upload(self, path: Path | None = None, *, name: str | None = None, data: bytes | None = None) -> str:
        """Upload through the file input and wait until the document is selected and ready; its id."""
        if data is None:
            assert path is not None
            data = path.read_bytes()
        name = name or path.name
        self.page.set_input_files(
            "#file", files=[{"name": name, "mimeType": "application/octet-stream", "buffer": data}]
        )
        self.page.click("#upload")
        return self.wait_selected_ready(name)

    def wait_selected_ready(self, name: str, timeout_ms: int = 120_000) -> str:
        """Wait until the document named ``name`` is selected and ready; its id."""
        self.page.wait_for_function(
            """(name) => { const li = document.querySelector('#doc-list li.doc.selected');
                 return li && li.classList.contains('status-ready')
                   && li.querySelector('.doc-name').textContent === name; }""",
            arg=name,
            timeout=timeout_ms,
        )
        return self.page.get_attribute("#doc-list li.doc.selected", "data-id")

    def ask(self, question: str, *, max_tokens: int = 32, verify16: bool = True) -> str:
        """Ask and wait for the end of the answer (any outcome); the latest turn's answer text."""
        self.page.fill("#question", question)
        self.page.set_checked("#verify16", verify16)
        self.page.fill("#max-tokens", str(max_tokens))
        self.page.click("#ask")  # the handler marks the turn `waiting` before click() returns
        self.page.wait_for_selector(
            "#thread .turn:last-child:is(.done, .error, .stopped)", state="attached", timeout=120_000
        )
        return self.page.inner_text("#thread .turn:last-child .answer")

    def stat(self, key: str) -> str:
        return self.page.inner_text(f"#stats dd[data-stat='{key}']")

    def record_texts(self, selector: str, name: str) -> None:
        self.page.evaluate(_RECORD_TEXTS, [selector, name])

    def document_text(self, doc_id: str) -> str:
        return self.page.evaluate(
            """(id) => fetch('/v1/documents/' + id + '/text', {headers:
                 {Authorization: 'Bearer ' + sessionStorage.getItem('docqa.apiKey')}}).then((r) => r.json())""",
            doc_id,
        )["text"]

    def assert_in_view(self, locator, what: str) -> None:
        """Scroll to `locator` as a person would; it is then visible, inside the viewport and not covered.

        The page renders a list anew when any of its requests answers (the document list after a reload
        comes from two: GET /health and GET /v1/documents), so a node found may be replaced before the
        scroll reaches it: the scroll is tried again on the new node, a few times."""
        for attempt in range(5):
            try:
                locator.scroll_into_view_if_needed()
                break
            except PlaywrightError as err:
                if "not attached" not in str(err) or attempt == 4:
                    raise
                self.page.wait_for_timeout(100)
        assert locator.is_visible(), f"{what} is not visible at {self.width}x{self.height}"
        box = locator.bounding_box()
        assert box is not None and box["width"] > 0 and box["height"] > 0, f"{what} has no size: {box}"
        where = f"{what} at {self.width}x{self.height}: {box}"
        assert box["x"] >= -0.5 and box["x"] + box["width"] <= self.width + 0.5, f"outside horizontally: {where}"
        assert box["y"] >= -0.5, f"above the viewport: {where}"
        # An element taller than the viewport only has to start inside it.
        assert box["y"] + min(box["height"], self.height) <= self.height + 0.5, f"below the viewport: {where}"
        covered = locator.evaluate(_COVERED_BY)
        assert covered is None, f"{what} is covered by {covered} at {self.width}x{self.height}"

    def screenshot(self, name: str, *, update: str | None = None) -> Path:
        """Full-page screenshot into tests/artifacts; with DOCQA_UPDATE_SCREENSHOTS=1 also into
        web/screenshots/`update` (the README's pictures)."""
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / name
        self.page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 10_000
        if update and os.environ.get("DOCQA_UPDATE_SCREENSHOTS") == "1":
            shutil.copyfile(path, ROOT / "web" / "screenshots" / update)
        return path


def sse(*frames: dict | str) -> str:
    """A text/event-stream body: dicts become `data:` JSON frames, strings are sent as they are."""
    return "".join(f"data: {json.dumps(f)}\n\n" if isinstance(f, dict) else f"{f}\n\n" for f in frames)


def chunk(delta: dict, finish: str | None = None, **extra) -> dict:
    """One chat.completion.chunk as /v1/chat/completions streams it."""
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "doc:test",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }


def document_tokens(page) -> str:
    """The prefix tokens the selected document's entry shows ("ready · 1 page · 259 tokens" -> "259")."""
    text = page.locator("#doc-list li.doc.selected").inner_text()
    match = re.search(r"ready · 1 page · ([\d,]+) tokens", text)  # "1 page", not "1 pages"
    assert match, text
    return match.group(1)
