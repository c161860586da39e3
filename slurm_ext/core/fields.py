"""Field declarations for configuration dataclasses: metadata only, no reading.

The policy declares its knobs with these so that it needs no loader; the shells'
TOML loader (`slurm_ext.core.config`) reads the metadata to refuse values a field does not
allow. They live here, in the pure layer, because the policy's own config uses them.
"""

from __future__ import annotations

import dataclasses
from typing import Any


def choices(*allowed: Any, default: Any) -> Any:
    """A dataclass field limited to `allowed` values."""
    return dataclasses.field(default=default, metadata={"choices": allowed})


def positive(default: Any) -> Any:
    """A numeric dataclass field that must be > 0 (0 would make it meaningless)."""
    return dataclasses.field(default=default, metadata={"positive": True})
