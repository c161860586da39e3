"""Field declarations for configuration dataclasses: metadata only, no reading.

The policy declares its knobs with these so that it needs no loader; the shells'
TOML loader (`slurm_ext.core.config`) reads the metadata to refuse values a field does not
allow, and to find where in a file a field is set (`place`):
- ADMIN (the default): in the dataclass's own table, e.g. `[policy]`;
- TUNING: in that table's `tuning` sub-table, e.g. `[policy.tuning]`: constants of a rule
  that benchmarks chose, which only a tuning study changes (not in the shipped files);
- SIMULATOR: only in the simulator's own policy file (`slurm-ext simulate --config`): a
  model of something the live site has itself (Slurm's fair-share weights), refused in
  a daemon's file.
They live here, in the pure layer, because the policy's own config uses them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

ADMIN, TUNING, SIMULATOR = "admin", "tuning", "simulator"
MISSING: Any = dataclasses.MISSING


def choices(*allowed: Any, default: Any, place: str = ADMIN) -> Any:
    """A dataclass field limited to `allowed` values."""
    return dataclasses.field(default=default, metadata={"choices": allowed, "place": place})


def positive(default: Any, place: str = ADMIN) -> Any:
    """A numeric dataclass field that must be > 0 (0 would make it meaningless)."""
    return dataclasses.field(default=default, metadata={"positive": True, "place": place})


def tuning(default: Any = MISSING, *, default_factory: Callable[[], Any] = MISSING) -> Any:
    """A field set in its table's `tuning` sub-table (TUNING above)."""
    return dataclasses.field(
        default=default, default_factory=default_factory, metadata={"place": TUNING}
    )


def simulator_only(default: Any) -> Any:
    """A field only the simulator's policy file sets (SIMULATOR above)."""
    return dataclasses.field(default=default, metadata={"place": SIMULATOR})


def place(f: dataclasses.Field) -> str:
    """Where a file sets the field: ADMIN, TUNING or SIMULATOR."""
    return f.metadata.get("place", ADMIN)
