"""``docqa mcp``: the MCP tools of server/api/mcp_tools.py over stdio (the transport desktop assistants
and editors start a server with), calling the docqa server at a URL over HTTP with its API key.

stdout is the protocol's: everything else (logs, warnings) goes to stderr.
"""

from __future__ import annotations

import logging
import sys

import anyio
import httpx

from server.api.mcp_tools import DocqaApi, build


def run(url: str, api_key: str | None) -> None:
    """Serve MCP on stdin/stdout until the client closes it."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="docqa mcp: %(message)s")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    async def main() -> None:
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=httpx.Timeout(30.0, read=None)) as client:
            await build(DocqaApi(client, url), read_paths=True).run_stdio_async()

    anyio.run(main)
