"""TOML in and out: TOML 1.0 reading (stdlib tomllib, or tomli below Python 3.11) and
writing with tomli-w (replay's generated service.toml, a fidelity run's policy table).

One module for both directions so callers need not know which library does which, and
`loads(dumps(d)) == d` holds for what the suite writes (tested).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import tomli_w

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

TOMLDecodeError = tomllib.TOMLDecodeError


def loads(text: str) -> dict[str, Any]:
    """Parse TOML 1.0 text (raises TOMLDecodeError)."""
    return tomllib.loads(text)


def dumps(data: Mapping[str, Any]) -> str:
    """TOML 1.0 text for `data`; raises TypeError for what TOML cannot hold (None, a key
    that is not a string)."""
    return tomli_w.dumps(data)
