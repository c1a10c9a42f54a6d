"""The web page, unchanged, against the cluster's ingress in a real browser: it loads, uploads a PDF,
and streams an answer about it through the reader replicas (the chat route, routed by document)."""

from __future__ import annotations

import pytest

from tests.web.pages import PDF, QUOTE, DocqaPage

pytestmark = pytest.mark.cluster


def test_the_page_works_against_the_ingress(cluster, chromium, cases):
    context = chromium.new_context(viewport={"width": 1280, "height": 720})
    try:
        page = context.new_page()
        run = DocqaPage(page, 1280, 720)
        page.on("pageerror", lambda exc: run.problems.append(f"page error: {exc}"))
        page.on("response", lambda r: r.status >= 400 and run.problems.append(f"HTTP {r.status} {r.url}"))
        page.goto(cluster.url + "/")
        page.wait_for_selector("#model-name:not(:text('…'))")
        run.upload(cases / PDF)
        answer = run.ask(QUOTE, max_tokens=32)
        assert page.get_attribute("#thread .turn:last-child", "class") == "turn done"
        assert "misfits" in answer.lower(), answer
        assert run.problems == []
    finally:
        context.close()
