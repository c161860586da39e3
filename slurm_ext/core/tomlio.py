"""TOML in and out: TOML 1.0 reading (stdlib tomllib, or tomli below Python 3.11) and a
small writer for the flat tables the suite emits (replay's service.toml).

The writer handles what we write and refuses the rest with a TypeError naming the key:
strings, booleans, integers, finite floats, arrays of those, and tables of those (nested
tables become `[a.b]` sections). It exists so that no TOML writer dependency is needed
for one generated file; `loads(dumps(d)) == d` is tested.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Mapping
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

TOMLDecodeError = tomllib.TOMLDecodeError
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def loads(text: str) -> dict[str, Any]:
    """Parse TOML 1.0 text (raises TOMLDecodeError)."""
    return tomllib.loads(text)


def dumps(data: Mapping[str, Any]) -> str:
    """TOML text for `data`: scalars first, then each sub-table as a `[section]`."""
    lines: list[str] = []
    _table(data, (), lines)
    return "\n".join(lines) + "\n"


def _table(data: Mapping[str, Any], path: tuple[str, ...], lines: list[str]) -> None:
    tables = []
    for key, value in data.items():
        if not isinstance(key, str):
            raise TypeError(f"{'.'.join(path + (str(key),))}: TOML keys are strings")
        if isinstance(value, Mapping):
            tables.append((key, value))
        else:
            lines.append(f"{_key(key)} = {_value(value, '.'.join(path + (key,)))}")
    for key, value in tables:
        sub = path + (key,)
        if lines:
            lines.append("")
        lines.append(f"[{'.'.join(_key(k) for k in sub)}]")
        _table(value, sub, lines)


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _string(key)


def _string(s: str) -> str:
    out = []
    for c in s:
        if c in '"\\':
            out.append("\\" + c)
        elif c < " " or c == "\x7f":
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def _value(value: Any, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(f"{where}: {value!r} is not written (not finite)")
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v, f"{where}[{i}]") for i, v in enumerate(value)) + "]"
    raise TypeError(f"{where}: cannot write {type(value).__name__} as TOML")
