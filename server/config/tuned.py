"""The settings file ``docqa tune`` writes: ``DATA_DIR/settings.json``, read by the server at start
below the environment in precedence (init arguments > ``DOCQA_*`` variables > this file > defaults).

Only the settings tune measures may be in it (:data:`TUNABLE`); anything else, a value a setting
refuses, or a file that is not a JSON object stops the server at start with an error that names the
file. It is a pydantic-settings source (``Settings.settings_customise_sources``), as the
documentation suggests for a file of values below the environment.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

from pydantic import TypeAdapter, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import PydanticBaseSettingsSource

from runtime.atomic import write_atomic

SETTINGS_FILE = "settings.json"
#: The settings tune may write: questions at once, MTP draft depth, window policy, micro-batch, KV types.
TUNABLE = ("n_seq_max", "mtp_draft_tokens", "default_draft_tokens", "n_ubatch", "type_k", "type_v")
DEFAULT_DATA_DIR = Path("data")


class SettingsFileError(ValueError):
    """DATA_DIR/settings.json cannot be used; the message names the file and what to do."""


def settings_path(data_dir: Path | str) -> Path:
    return Path(data_dir) / SETTINGS_FILE


def read_tuned(path: Path, fields: dict[str, FieldInfo]) -> dict[str, Any]:
    """The settings in ``path`` ({} when there is no file), each checked against its field in ``fields``
    (Settings.model_fields); raises SettingsFileError naming the file and the setting."""
    if not path.is_file():
        return {}
    fix = f"fix or delete {path}, or run `docqa tune` again"
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise SettingsFileError(f"{path} is not readable JSON ({exc}); {fix}") from None
    if not isinstance(values, dict):
        raise SettingsFileError(f"{path} must hold a JSON object of settings, not {type(values).__name__}; {fix}")
    unknown = sorted(set(values) - set(TUNABLE))
    if unknown:
        raise SettingsFileError(
            f"{path} names {', '.join(unknown)}, which it may not set (only {', '.join(TUNABLE)}: the rest goes "
            f"in DOCQA_* environment variables); {fix}"
        )
    for name, value in values.items():
        try:
            check_value(name, value, fields, strict=True)
        except ValueError as exc:
            raise SettingsFileError(f"{path}: {exc}; {fix}") from None
    return values


def check_value(name: str, value: Any, fields: dict[str, FieldInfo], strict: bool = False) -> Any:
    """``value`` validated as setting ``name`` (its type and bounds in ``fields``); ValueError says why.
    ``strict``: no conversion from text (a JSON file has typed values; ``--candidate`` has text)."""
    field = fields[name]
    kind = Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
    try:
        return TypeAdapter(kind).validate_python(value, strict=strict)
    except ValidationError as exc:
        raise ValueError(f"{name}={value!r} is refused ({'; '.join(e['msg'] for e in exc.errors())})") from None


def write_tuned(path: Path, values: dict[str, Any]) -> None:
    """Replace ``path`` with ``values`` (TUNABLE settings only), atomically."""
    bad = sorted(set(values) - set(TUNABLE))
    if bad:
        raise ValueError(f"not tunable: {', '.join(bad)}")
    write_atomic(path, (json.dumps(dict(sorted(values.items())), indent=1) + "\n").encode())


def shadowed(names: list[str] | tuple[str, ...], environ: dict[str, str] | None = None) -> list[str]:
    """Of the settings ``names``, those a ``DOCQA_*`` environment variable sets (it wins over the file)."""
    env = {k.upper() for k in (os.environ if environ is None else environ)}
    return [name for name in names if f"DOCQA_{name.upper()}" in env]


def describe(data_dir: Path, fields: dict[str, FieldInfo]) -> str | None:
    """One line for the start-up log: which file settings apply and which the environment overrides."""
    path = settings_path(data_dir)
    values = read_tuned(path, fields)
    if not values:
        return None
    over = shadowed(tuple(values))
    applied = ", ".join(f"{k}={'unset' if v is None else v}" for k, v in values.items() if k not in over) or "none"
    line = f"settings from {path} (docqa tune): {applied}"
    return line + (f"; the environment overrides {', '.join(over)}" if over else "")


class TunedSettingsSource(PydanticBaseSettingsSource):
    """DATA_DIR/settings.json as a pydantic-settings source. DATA_DIR is what the sources before it
    (init arguments, then the environment) say, else ``data``."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ reads the whole file at once

    def __call__(self) -> dict[str, Any]:
        data_dir = self.current_state.get("data_dir") or DEFAULT_DATA_DIR
        return read_tuned(settings_path(data_dir), self.settings_cls.model_fields)
