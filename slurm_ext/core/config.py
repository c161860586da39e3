"""TOML configuration, validated against dataclasses so errors name the file and the key.

Each daemon declares its config as nested dataclasses (one per TOML table) with typed
fields and defaults; `load_config` reads the file and builds them, refusing unknown keys,
wrong types and values a field's `choices` metadata does not allow. A field's `place`
(`slurm_ext.core.fields`) says where a file sets it: in its table, in the table's
`tuning` sub-table, or (simulator-only) nowhere but the simulator's policy file. A key an
earlier release read and this one does not is refused with what replaced it
(REMOVED_KEYS), and so is a key set outside its place. Every number of every
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
from slurm_ext.core.fields import ADMIN, SIMULATOR, TUNING, choices, place, positive

T = TypeVar("T")
__all__ = [
    "REMOVED_KEYS",
    "ConfigError",
    "choices",
    "file_keys",
    "from_dict",
    "load_config",
    "positive",
    "to_table",
]

MAX_FILE_BYTES = 1 << 20
MAX_DEPTH = 32  # nested arrays and inline tables
MAX_NUMBER = 1e12  # ~31,700 years in seconds; larger overflows timers and sleeps
TUNING_TABLE = "tuning"  # the sub-table of a table's TUNING fields

_CLASSES = (
    "moved to the classes file that the service and the node agents both read "
    "(etc/classes.toml, installed as /etc/slurm-ext/classes.toml; `classes_file` names "
    "another); delete the line here"
)
# Keys earlier releases read, per config dataclass (by class name), with what replaced
# them: a file that still sets one is refused with this sentence, naming the file and
# the key. A key listed here is refused even where the dataclass keeps the field for
# its own use (`PolicyConfig.gittins_index`: the shells set it). Keys moved into a
# `tuning` sub-table, or simulator-only, are refused from their fields' `place`.
REMOVED_KEYS: dict[str, dict[str, str]] = {
    "PolicyConfig": {
        "gittins_censored": (
            "removed: the Kaplan-Meier estimate over the active jobs was within noise of "
            "the completed jobs' estimate on the benchmark traces; delete the line"
        ),
        "gittins_kind_choice": (
            'removed: "tightest" was not adopted (benchmarks.studies.shapes: no loss '
            "removed, worse on the tuning traces); a job reads the finest group of its kind with enough "
            'samples, as "finest" did; delete the line'
        ),
        "gittins_whole_order": (
            'removed: "run_time" was not adopted (benchmarks.studies.targets --only np: '
            "better on four trace sets, worse on three); without preemption jobs are ordered by "
            'expected remaining GPU-time, as "gpu_time" did; delete the line'
        ),
        "gittins_index": (
            'removed: the index follows `preemption`, as "auto" did (the whole-job index '
            "without preemption, Tiresias' quantum index with it); delete the line"
        ),
        "wait_guard": (
            'removed: the wait guard lifts a due job ahead of unguarded ones, as "promote" '
            'did ("age" was not adopted); wait_guard_factor = 0 in [policy.tuning] turns '
            "the guard off; delete the line"
        ),
        "wait_guard_budget": (
            "removed: no budget held on every trace set (benchmarks.studies.targets --only "
            "np); the wait guard lifts every job it is due for, as 0 did; delete the line"
        ),
        "wait_guard_budget_scope": "removed with wait_guard_budget; delete the line",
        "starvation_scope": (
            "removed: the starvation guard covers the requeued jobs the wait guard cannot "
            'judge, as "backstop" did ("all" turned the order first come, first served '
            "on long runs under a sustained backlog); delete the line"
        ),
        "fairshare_guard": (
            'removed: a wait-guarded job gets the top SiteFactor, as "site" did ("promote" '
            "was simulator-only and not adopted); delete the line"
        ),
    },
    "OpportunisticSection": {
        "opportunistic_qos": _CLASSES,
        "guaranteed_qos": _CLASSES,
        "opportunistic_partitions": _CLASSES,
        "guaranteed_partitions": _CLASSES,
    },
    "ColocationConfig": {
        "opportunistic_qos": _CLASSES,
        "guaranteed_qos": _CLASSES,
        "opportunistic_partitions": _CLASSES,
        "guaranteed_partitions": _CLASSES,
        "default_class": _CLASSES,
    },
}


class ConfigError(ValueError):
    """A configuration problem, with the file and the dotted key it concerns."""

    def __init__(self, path: str | Path | None, key: str, message: str) -> None:
        self.path = str(path) if path is not None else "<defaults>"
        self.key = key
        self.message = message
        where = f"{self.path}: {key}" if key else self.path
        super().__init__(f"{where}: {message}")


def load_config(cls: type[T], path: str | Path | None, simulator: bool = False) -> T:
    """Read `path` (or use defaults when None) into an instance of the dataclass `cls`.
    `simulator`: the file is the simulator's policy file, which may set SIMULATOR fields."""
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
    return from_dict(cls, data, path, simulator=simulator)


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


def from_dict(
    cls: type[T],
    data: dict[str, Any],
    path: str | Path | None,
    prefix: str = "",
    simulator: bool = False,
) -> T:
    if not isinstance(data, dict):
        raise ConfigError(path, prefix.rstrip("."), f"expected a table, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    removed = REMOVED_KEYS.get(cls.__name__, {})
    tuned = {n for n, f in fields.items() if place(f) == TUNING and n not in removed}
    here = {n for n, f in fields.items() if _settable(f, simulator) and n not in removed}
    values = {k: v for k, v in data.items() if not (tuned and k == TUNING_TABLE)}
    for key in values:
        _check_key(key, here, fields, removed, path, prefix)
    sub: Any = data.get(TUNING_TABLE, {}) if tuned else {}
    if not isinstance(sub, dict):
        raise ConfigError(path, prefix + TUNING_TABLE, f"expected a table, got {_kind(sub)}")
    for key in sub:
        _check_key(key, tuned, fields, removed, path, f"{prefix}{TUNING_TABLE}.")
    kwargs: dict[str, Any] = {}
    for name in here:
        if name in values:
            kwargs[name] = _coerce(
                hints[name], values[name], path, prefix + name, fields[name], simulator
            )
    for name in tuned:
        if name in sub:
            key = f"{prefix}{TUNING_TABLE}.{name}"
            kwargs[name] = _coerce(hints[name], sub[name], path, key, fields[name], simulator)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(path, prefix.rstrip("."), str(exc)) from exc


def _settable(f: dataclasses.Field, simulator: bool) -> bool:
    """Whether a file sets the field in its own table (not in `tuning`, not removed)."""
    where = place(f)
    return where == ADMIN or (where == SIMULATOR and simulator)


def _check_key(
    key: str,
    allowed: set[str],
    fields: dict[str, dataclasses.Field],
    removed: dict[str, str],
    path: Any,
    prefix: str,
) -> None:
    """Refuse a key this table does not take here, saying what replaced it if anything."""
    if key in allowed:
        return
    if key in removed:
        raise ConfigError(path, prefix + key, removed[key])
    where = place(fields[key]) if key in fields else None
    table = prefix.removesuffix(f"{TUNING_TABLE}.")
    if where == TUNING:
        raise ConfigError(
            path,
            prefix + key,
            f"moved to the [{table}{TUNING_TABLE}] table: a tuning constant that only a "
            'tuning study changes (the docs\' "Tuning constants" list each one)',
        )
    if where == SIMULATOR:
        raise ConfigError(
            path,
            prefix + key,
            "simulator-only: it models Slurm's own priority for `slurm-ext simulate`, "
            "whose policy file (--config) sets it; a daemon reads Slurm's priority "
            "itself. Delete the line here",
        )
    if where == ADMIN:
        home = f"[{table.rstrip('.')}]" if table else "the top level"
        raise ConfigError(path, prefix + key, f"belongs in {home}, not in [{prefix.rstrip('.')}]")
    known = ", ".join(sorted(allowed))
    raise ConfigError(path, prefix + key, f"unknown key (known keys: {known})")


def file_keys(cls: type, simulator: bool = False, prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted key as a file writes it, type) of every key a file can set for `cls`:
    nested tables followed, TUNING fields under `tuning`, SIMULATOR fields only for the
    simulator's policy file, removed keys left out."""
    out: list[tuple[str, Any]] = []
    hints = typing.get_type_hints(cls)
    removed = REMOVED_KEYS.get(cls.__name__, {})
    for f in dataclasses.fields(cls):
        if f.name in removed or (place(f) == SIMULATOR and not simulator):
            continue
        where = f"{prefix}{TUNING_TABLE}." if place(f) == TUNING else prefix
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            out += file_keys(tp, simulator, f"{where}{f.name}.")  # type: ignore[arg-type]
        else:
            out.append((where + f.name, tp))
    return out


def to_table(obj: Any, simulator: bool = False) -> dict[str, Any]:
    """The dataclass instance `obj` as the table a file would hold (`load_config` reads it
    back to an equal instance): TUNING fields under `tuning`, SIMULATOR fields only for
    the simulator's policy file, removed keys and None values left out."""
    out: dict[str, Any] = {}
    sub: dict[str, Any] = {}
    removed = REMOVED_KEYS.get(type(obj).__name__, {})
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.name in removed or value is None or (place(f) == SIMULATOR and not simulator):
            continue
        if dataclasses.is_dataclass(value):
            value = to_table(value, simulator)
        elif isinstance(value, tuple):
            value = list(value)
        (sub if place(f) == TUNING else out)[f.name] = value
    if sub:
        out[TUNING_TABLE] = sub
    return out


def _coerce(
    tp: Any,
    value: Any,
    path: Any,
    key: str,
    f: dataclasses.Field | None = None,
    simulator: bool = False,
) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, path, key + ".", simulator)
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
