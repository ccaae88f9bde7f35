"""Settings for every service: flags > environment (GPUWARDEN_<FIELD>) > YAML file > default.

A leaf module (stdlib + PyYAML). Each service declares one frozen dataclass; :func:`load`
fills it from the three layers, coerces types and runs the dataclass's own checks
(``__post_init__`` raising ValueError). Any problem becomes one :class:`SettingsError`
line, which the CLI prints before exiting 2: a bad value stops the start.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")
ENV_PREFIX = "GPUWARDEN_"


class SettingsError(ValueError):
    """A setting is missing, malformed or out of range; the message is one line for the user."""


def _coerce(name: str, value: Any, hint: Any) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(name, value, inner[0])
    if origin is tuple:
        items = value.split(",") if isinstance(value, str) else list(value)
        return tuple(
            _coerce(name, v.strip() if isinstance(v, str) else v, args[0]) for v in items if v != ""
        )
    if hint is bool:
        if isinstance(value, bool):
            return value
        s = str(value).strip().lower()
        if s in ("1", "true", "yes", "on"):
            return True
        if s in ("0", "false", "no", "off"):
            return False
        raise SettingsError(f"{name}: {value!r} is not a boolean (true/false)")
    if hint in (int, float):
        try:
            return hint(value)
        except (TypeError, ValueError):
            kind = "an integer" if hint is int else "a number"
            raise SettingsError(f"{name}: {value!r} is not {kind}") from None
    if hint is Path:
        return Path(str(value))
    if hint is str:
        if isinstance(value, (dict, list)):
            raise SettingsError(f"{name}: expected a string, got {type(value).__name__}")
        return str(value)
    return value


def read_yaml(path: str | Path) -> dict[str, Any]:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise SettingsError(f"config file {path}: {e.strerror or e}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SettingsError(
            f"config file {path}: not valid YAML ({str(e).splitlines()[0]})"
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"config file {path}: expected a mapping at the top level")
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def load(
    cls: type[T],
    flags: Mapping[str, Any],
    env: Mapping[str, str] | None = None,
    config_file: str | Path | None = None,
) -> T:
    """Build ``cls`` from flags (None = not given), env and an optional YAML file."""
    env = os.environ if env is None else env
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    file_values = read_yaml(config_file) if config_file else {}
    unknown = sorted(set(file_values) - set(fields))
    if unknown:
        raise SettingsError(f"config file {config_file}: unknown setting(s) {', '.join(unknown)}")
    values: dict[str, Any] = {}
    for name in fields:
        flag = flags.get(name)
        env_value = env.get(ENV_PREFIX + name.upper())
        if flag is not None:
            raw, where = flag, "--" + name.replace("_", "-")
        elif env_value is not None:
            raw, where = env_value, ENV_PREFIX + name.upper()
        elif name in file_values:
            raw, where = file_values[name], f"{config_file}: {name}"
        else:
            continue
        values[name] = _coerce(where, raw, hints[name])
    try:
        return cls(**values)
    except SettingsError:
        raise
    except (TypeError, ValueError) as e:
        raise SettingsError(str(e).splitlines()[0] if str(e) else type(e).__name__) from None
