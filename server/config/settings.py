"""Typed settings, read from the environment with the prefix ``DOCQA_`` (pydantic-settings), and
below it from ``DATA_DIR/settings.json``, the file ``docqa tune`` writes (server/config/tuned.py).

:class:`Settings` is the settings of one server, in groups by what they configure: the model and
decoding (server/config/model.py), documents (server/config/documents.py), the HTTP server
(server/config/http_server.py), servers sharing one store (server/config/shared.py), and watched folders
and MCP (server/config/sources.py). Every field is
documented in README.md.
"""

from __future__ import annotations

from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from server.config.documents import DocumentSettings
from server.config.http_server import HttpSettings
from server.config.model import MAX_SEQS, KvType, ModelSettings
from server.config.shared import SharedSettings
from server.config.sources import SourceSettings
from server.config.tuned import TunedSettingsSource

__all__ = ["MAX_SEQS", "KvType", "Settings"]


class Settings(ModelSettings, DocumentSettings, HttpSettings, SharedSettings, SourceSettings):
    """Server, model and decoding settings (env prefix ``DOCQA_``)."""

    model_config = SettingsConfigDict(env_prefix="DOCQA_", extra="ignore")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Arguments, then DOCQA_* variables, then DATA_DIR/settings.json (docqa tune), then defaults."""
        return init_settings, env_settings, dotenv_settings, file_secret_settings, TunedSettingsSource(settings_cls)
