"""Typed settings, read from the environment with the prefix ``DOCQA_`` (pydantic-settings), and
below it from ``DATA_DIR/settings.json``, the file ``docqa tune`` writes (server/config/tuned.py).

:class:`Settings` is the settings of one server, in groups by what they configure: the model and
decoding (server/config/model.py), documents (server/config/documents.py), the HTTP server
(server/config/http_server.py), servers sharing one store (server/config/shared.py), and watched folders
and MCP (server/config/sources.py). Every field is documented in docs/settings.md (tests/test_readme.py).

Settings that exist for debugging, benchmarks or compatibility are named ``debug_*`` (``DOCQA_DEBUG_*``).
One renamed so keeps its old variable as a deprecated alias (``validation_alias``, new name first);
:func:`deprecated_in` names the old ones an environment still sets, for the start-up log.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import AliasChoices
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from server.config.documents import DocumentSettings
from server.config.http_server import HttpSettings
from server.config.model import MAX_SEQS, KvType, ModelSettings
from server.config.shared import SharedSettings
from server.config.sources import SourceSettings
from server.config.tuned import TunedSettingsSource

__all__ = ["MAX_SEQS", "KvType", "Settings", "deprecated_aliases", "deprecated_in"]


class Settings(ModelSettings, DocumentSettings, HttpSettings, SharedSettings, SourceSettings):
    """Server, model and decoding settings (env prefix ``DOCQA_``)."""

    # validate_by_name: Settings(debug_text_rules=1) still works on a field with a validation_alias
    model_config = SettingsConfigDict(env_prefix="DOCQA_", extra="ignore", validate_by_name=True)

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


def deprecated_aliases() -> dict[str, str]:
    """``{old variable: new variable}`` for every renamed setting, e.g. ``DOCQA_TEXT_RULES`` ->
    ``DOCQA_DEBUG_TEXT_RULES`` (the choices after the first of a field's ``AliasChoices``)."""
    aliases = {}
    for field in Settings.model_fields.values():
        if isinstance(field.validation_alias, AliasChoices):
            new, *old = field.validation_alias.choices
            aliases.update({str(name).upper(): str(new).upper() for name in old})
    return aliases


def deprecated_in(environ: Mapping[str, str] | None = None) -> list[str]:
    """One warning line for each deprecated variable set in ``environ`` (default: ``os.environ``),
    naming the variable to use instead; [] when none is set. Variable names are matched case-blind,
    as pydantic-settings reads them."""
    names = {k.upper() for k in (os.environ if environ is None else environ)}
    return [
        f"{old} is deprecated: set {new} instead" + (f" ({old} is ignored while {new} is set)" if new in names else "")
        for old, new in deprecated_aliases().items()
        if old in names
    ]
