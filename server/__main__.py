"""``python -m server``: read settings from the environment and serve on 127.0.0.1:8000 by default."""

from __future__ import annotations

import logging
import sys

import uvicorn
from pydantic import ValidationError

from server.settings import Settings


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = Settings()
    except ValidationError as exc:
        sys.exit(f"docqa: invalid settings (DOCQA_* environment variables):\n{exc}")
    from server.app import create_app

    logging.getLogger("docqa").info("serving on http://%s:%d", settings.host, settings.port)
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="info")


if __name__ == "__main__":
    main()
