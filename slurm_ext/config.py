"""TOML configuration, validated against dataclasses so errors name the file and the key.

Each daemon declares its config as nested dataclasses (one per TOML table) with typed
fields and defaults; `load_config` reads the file and builds them, refusing unknown keys,
wrong types and values a field's `choices` metadata does not allow. Daemons exit with
status 2 on ConfigError.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import toml

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration problem, with the file and the dotted key it concerns."""

    def __init__(self, path: str | Path | None, key: str, message: str) -> None:
        self.path = str(path) if path is not None else "<defaults>"
        self.key = key
        self.message = message
        where = f"{self.path}: {key}" if key else self.path
        super().__init__(f"{where}: {message}")


def choices(*allowed: Any, default: Any) -> Any:
    """A dataclass field limited to `allowed` values."""
    return dataclasses.field(default=default, metadata={"choices": allowed})


def load_config(cls: type[T], path: str | Path | None) -> T:
    """Read `path` (or use defaults when None) into an instance of the dataclass `cls`."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(p, "", "file not found")
        try:
            data = toml.loads(p.read_text())
        except (toml.TomlDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(p, "", f"not valid TOML: {exc}") from exc
        except OSError as exc:
            raise ConfigError(p, "", f"cannot read: {exc}") from exc
    return from_dict(cls, data, path)


def from_dict(cls: type[T], data: dict[str, Any], path: str | Path | None, prefix: str = "") -> T:
    if not isinstance(data, dict):
        raise ConfigError(path, prefix.rstrip("."), f"expected a table, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    for key in data:
        if key not in fields:
            known = ", ".join(sorted(fields))
            raise ConfigError(path, prefix + key, f"unknown key (known keys: {known})")
    kwargs: dict[str, Any] = {}
    for name, f in fields.items():
        if name not in data:
            continue
        kwargs[name] = _coerce(hints[name], data[name], path, prefix + name, f)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(path, prefix.rstrip("."), str(exc)) from exc


def _coerce(tp: Any, value: Any, path: Any, key: str, f: dataclasses.Field | None = None) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, path, key + ".")
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(arg, value, path, key, f)
            except ConfigError as exc:
                errors.append(exc.message)
        raise ConfigError(path, key, "; ".join(errors))
    if origin in (list, tuple):
        if not isinstance(value, list):
            raise ConfigError(path, key, f"expected a list, got {_kind(value)}")
        inner = args[0] if args else Any
        items = [_coerce(inner, v, path, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(path, key, f"expected a table, got {_kind(value)}")
        vt = args[1] if len(args) == 2 else Any
        return {str(k): _coerce(vt, v, path, f"{key}.{k}") for k, v in value.items()}
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(path, key, f"expected true or false, got {_kind(value)}")
    elif tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(path, key, f"expected an integer, got {_kind(value)}")
    elif tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(path, key, f"expected a number, got {_kind(value)}")
        value = float(value)
    elif tp is str:
        if not isinstance(value, str):
            raise ConfigError(path, key, f"expected a string, got {_kind(value)}")
    allowed = f.metadata.get("choices") if f is not None else None
    if allowed and value not in allowed:
        raise ConfigError(
            path, key, f"must be one of {', '.join(map(repr, allowed))}, got {value!r}"
        )
    return value


def _kind(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}.get(
        type(value), type(value).__name__
    ) + f" ({value!r})"
