"""The settings of where documents come from besides uploads, and who else asks about them: watched
folders (server/service/watch.py) and the MCP server (server/mcp/). A part of
:class:`server.config.settings.Settings`; every field is documented in docs/settings.md.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode


class SourceSettings(BaseSettings):
    """Watched folders and MCP."""

    watch: Annotated[list[Path], NoDecode] = Field(
        default_factory=list,
        description=(
            "Folders kept in sync, separated by ':' (/docs:/more): their documents are read, re-read when they "
            "change and removed when they go. Empty: none."
        ),
    )
    watch_settle_s: float = Field(
        default=2.0,
        ge=0,
        description="Seconds a changed file must stay unchanged (size and mtime) before it is read again.",
    )
    watch_order: Literal["small", "recent"] = Field(
        default="small",
        description="Which waiting files of a watched folder are read first: the smallest, or the last changed.",
    )
    watch_rescan_s: float = Field(
        default=300.0,
        gt=0,
        description=(
            "Seconds between full scans of the watched folders (what file events missed: a network share, "
            "an inotify limit)."
        ),
    )
    watch_gone: Literal["keep", "delete"] = Field(
        default="keep",
        description=(
            "What a watched folder that goes (renamed away, unmounted, unreadable, or empty where its files were) "
            'does to its documents: keep them, marked "folder unavailable", until it is back (files with the same '
            "bytes keep their documents), or delete them (the behaviour before issue 49)."
        ),
    )
    mcp_http: bool = Field(
        default=True,
        description="Serve MCP (streamable HTTP) at /mcp, behind the API key like every other route.",
    )

    @field_validator("watch", mode="before")
    @classmethod
    def _paths(cls, value: object) -> object:
        if isinstance(value, str):
            return [Path(p).expanduser() for p in value.split(os.pathsep) if p.strip()]
        return value
