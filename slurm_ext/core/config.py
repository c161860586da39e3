"""TOML configuration, validated against dataclasses so errors name the file and the key.

Each daemon declares its config as nested dataclasses (one per TOML table) with typed
fields and defaults; `load_config` reads the file and builds them, refusing unknown keys,
wrong types and values a field's `choices` metadata does not allow. Every number of every
daemon's config passes one check here: finite (TOML has nan and inf), not negative, at
most MAX_NUMBER, and above zero where the field is declared `positive` (an interval, a
timeout, a count that 0 would make meaningless). A file over MAX_FILE_BYTES or nested
deeper than MAX_DEPTH is refused before it is parsed (the parser recurses). Daemons exit
with status 2 on ConfigError.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from slurm_ext.core import tomlio
from slurm_ext.core.fields import choices, positive

T = TypeVar("T")
__all__ = ["ConfigError", "choices", "from_dict", "load_config", "positive"]

MAX_FILE_BYTES = 1 << 20
MAX_DEPTH = 32  # nested arrays and inline tables
MAX_NUMBER = 1e12  # ~31,700 years in seconds; larger overflows timers and sleeps


class ConfigError(ValueError):
    """A configuration problem, with the file and the dotted key it concerns."""

    def __init__(self, path: str | Path | None, key: str, message: str) -> None:
        self.path = str(path) if path is not None else "<defaults>"
        self.key = key
        self.message = message
        where = f"{self.path}: {key}" if key else self.path
        super().__init__(f"{where}: {message}")


def load_config(cls: type[T], path: str | Path | None) -> T:
    """Read `path` (or use defaults when None) into an instance of the dataclass `cls`."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(p, "", "file not found")
        try:
            with p.open("rb") as fh:
                raw = fh.read(MAX_FILE_BYTES + 1)
            if len(raw) > MAX_FILE_BYTES:
                raise ConfigError(p, "", f"larger than {MAX_FILE_BYTES} bytes")
            text = raw.decode()
            depth = nesting_depth(text)
            if depth > MAX_DEPTH:
                raise ConfigError(
                    p, "", f"arrays or inline tables nested {depth} deep (at most {MAX_DEPTH})"
                )
            data = tomlio.loads(text)
        except (tomlio.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(p, "", f"not valid TOML: {exc}") from exc
        except OSError as exc:
            raise ConfigError(p, "", f"cannot read: {exc}") from exc
    return from_dict(cls, data, path)


def nesting_depth(text: str) -> int:
    """The deepest nesting of `[` and `{` outside strings and comments (a bound, not a
    parse: a table header counts as one level)."""
    depth = deepest = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "#":
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif c in "\"'":
            triple = text.startswith(c * 3, i)
            quote = c * 3 if triple else c
            j = i + len(quote)
            while j < n and not text.startswith(quote, j):
                if c == '"' and text[j] == "\\":
                    j += 1  # skip the escaped character
                elif not triple and text[j] == "\n":
                    break
                j += 1
            i = j + len(quote)
            continue
        elif c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth = max(0, depth - 1)
        i += 1
    return deepest


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
        _check_number(value, path, key, f)
    elif tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(path, key, f"expected a number, got {_kind(value)}")
        value = float(value)
        _check_number(value, path, key, f)
    elif tp is str:
        if not isinstance(value, str):
            raise ConfigError(path, key, f"expected a string, got {_kind(value)}")
    allowed = f.metadata.get("choices") if f is not None else None
    if allowed and value not in allowed:
        raise ConfigError(
            path, key, f"must be one of {', '.join(map(repr, allowed))}, got {value!r}"
        )
    return value


def _check_number(value: float, path: Any, key: str, f: dataclasses.Field | None) -> None:
    """The one bound every configured number meets (see the module docstring)."""
    if not math.isfinite(value):
        raise ConfigError(path, key, f"must be a finite number, got {value!r}")
    if value < 0:
        raise ConfigError(path, key, f"must be >= 0, got {value!r}")
    if value > MAX_NUMBER:
        raise ConfigError(path, key, f"must be at most {MAX_NUMBER:g}, got {value!r}")
    if value == 0 and f is not None and f.metadata.get("positive"):
        raise ConfigError(path, key, "must be > 0, got 0")


def _kind(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}.get(
        type(value), type(value).__name__
    ) + f" ({value!r})"
