"""``python -m server``: read settings from the environment, run the start-up self-test, and serve on
127.0.0.1:8000 by default."""

from __future__ import annotations

import logging
import sys

import uvicorn
from pydantic import ValidationError

from server.settings import Settings


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from server import selftest
    from server.app import create_app
    from server.memory import with_preset

    try:
        settings = with_preset(Settings())
    except (ValidationError, ValueError) as exc:
        sys.exit(f"docqa: invalid settings (DOCQA_* environment variables):\n{exc}")

    try:
        result = selftest.check(settings)
    except selftest.SelfTestFailed as exc:
        sys.exit(str(exc))
    if result.extra_bufts is False and settings.cpu_repack == "auto":  # a fallback, now or cached
        settings = settings.model_copy(update={"cpu_repack": "off"})
    logging.getLogger("docqa").info(
        "self-test %s; serving on http://%s:%d", result.status, settings.host, settings.port
    )
    uvicorn.run(create_app(settings, result), host=settings.host, port=settings.port, log_level="info")


if __name__ == "__main__":
    main()
