"""What co-location did to each kind of job, learnt from measurements, for EaCO admission.

A kind is one of a job's keys: its model hint, its job name or its user. For each kind the
history keeps two rows, alone and shared: the seconds measured, the runs seen, and
time-weighted sums of GPU utilisation, GPU power and relative speed (progress rate, or
utilisation where no rate was reported, over the job's own solo level). `predict` turns a
job's keys into the agent's `colocation.Prediction`: the slowdown it suffered when it
shared a GPU and the power it drew alone, from the most specific kind with enough runs of
each; a job with none keeps the configured values (nodeagent's EacoModel).

The table lives in the service's SQLite store but is created here with CREATE TABLE IF
NOT EXISTS, outside the store's numbered migrations: adding it never renumbers another
schema change, and an older release ignores it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from slurm_ext.policy import Prediction

KINDS = ("model", "name", "user")  # most specific first
MAX_KEY_LEN = 256  # a job name or user comes from a user: bounded before it is stored

SCHEMA = """
CREATE TABLE IF NOT EXISTS coloc_history (
    kind TEXT NOT NULL,           -- model / name / user
    key TEXT NOT NULL,
    shared INTEGER NOT NULL,      -- 0: ran alone on its GPUs, 1: beside another job
    runs INTEGER NOT NULL,
    seconds REAL NOT NULL,
    util_s REAL NOT NULL,         -- sum of GPU utilisation x seconds
    power_s REAL NOT NULL,        -- sum of GPU power (W) x seconds
    speed_s REAL NOT NULL,        -- sum of speed relative to alone x seconds (shared rows)
    PRIMARY KEY (kind, key, shared)
)
"""


@dataclass(frozen=True)
class Observation:
    """One job's measurements over one run (or one report period), alone and shared.

    `shared_speed` is the job's progress rate beside others over its rate alone (or its
    utilisation over its solo utilisation when it reports no progress)."""

    keys: Mapping[str, str]  # kind -> key, e.g. {"name": "train-bert", "user": "ana"}
    alone_s: float = 0.0
    alone_util: float = 0.0
    alone_power_w: float = 0.0
    shared_s: float = 0.0
    shared_util: float = 0.0
    shared_power_w: float = 0.0
    shared_speed: float = 1.0

    def __post_init__(self) -> None:
        bad = [k for k in self.keys if k not in KINDS]
        if bad:
            raise ValueError(f"Observation: unknown kind(s) {bad}; expected one of {KINDS}")
        for name in ("alone_s", "shared_s", "alone_power_w", "shared_power_w"):
            if getattr(self, name) < 0:
                raise ValueError(f"Observation.{name} must be >= 0, got {getattr(self, name)}")
        for name in ("alone_util", "shared_util", "shared_speed"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.5:
                raise ValueError(f"Observation.{name} must be within 0..1.5, got {v}")


@dataclass(frozen=True)
class KindRow:
    runs: int
    seconds: float
    util: float  # time-weighted means
    power_w: float
    speed: float


class ColocHistory:
    """The history table on an open SQLite connection (the store's, or its own file)."""

    def __init__(self, db: sqlite3.Connection, readonly: bool = False) -> None:
        self.db = db
        self.readonly = readonly
        if not readonly:
            with db:
                db.execute(SCHEMA)

    def record(self, observations: Iterable[Observation]) -> int:
        """Add observations; returns the rows touched. One transaction for all."""
        rows = []
        for o in observations:
            for kind, key in o.keys.items():
                if not key:
                    continue
                key = key[:MAX_KEY_LEN]
                if o.alone_s > 0:
                    rows.append(_row(kind, key, 0, o.alone_s, o.alone_util, o.alone_power_w, 1.0))
                if o.shared_s > 0:
                    rows.append(
                        _row(
                            kind,
                            key,
                            1,
                            o.shared_s,
                            o.shared_util,
                            o.shared_power_w,
                            o.shared_speed,
                        )
                    )
        with self.db:
            self.db.executemany(
                """INSERT INTO coloc_history VALUES (?, ?, ?, 1, ?, ?, ?, ?)
                   ON CONFLICT(kind, key, shared) DO UPDATE SET runs = runs + 1,
                       seconds = seconds + excluded.seconds, util_s = util_s + excluded.util_s,
                       power_s = power_s + excluded.power_s, speed_s = speed_s + excluded.speed_s""",
                rows,
            )
        return len(rows)

    def rows(self, kind: str, key: str) -> tuple[KindRow | None, KindRow | None]:
        """(alone, shared) rows of one kind's key; None where nothing was measured."""
        out: list[KindRow | None] = [None, None]
        try:
            found = self.db.execute(
                "SELECT shared, runs, seconds, util_s, power_s, speed_s FROM coloc_history"
                " WHERE kind = ? AND key = ?",
                (kind, key[:MAX_KEY_LEN]),
            ).fetchall()
        except sqlite3.OperationalError:  # a read-only store the service never gave the table
            return None, None
        for shared, runs, seconds, util_s, power_s, speed_s in found:
            if seconds > 0:
                out[int(shared)] = KindRow(
                    runs, seconds, util_s / seconds, power_s / seconds, speed_s / seconds
                )
        return out[0], out[1]

    def predict(self, keys: Mapping[str, str], min_runs: int = 3) -> Prediction | None:
        """The job's learnt EaCO inputs, or None when no kind of it has enough runs."""
        found = {k: self.rows(k, keys[k]) for k in KINDS if keys.get(k)}
        return predict(found, min_runs)


def predict(
    rows: Mapping[str, tuple[KindRow | None, KindRow | None]], min_runs: int = 3
) -> Prediction | None:
    """Pure: from each kind's (alone, shared) rows, most specific kind first, the slowdown
    of the first kind with `min_runs` shared runs and the power of the first with
    `min_runs` runs alone. Slowdown = 1 / speed - 1 (runtime added), at least 0."""
    slowdown = power = None
    notes: list[str] = []
    for kind in KINDS:
        if kind not in rows:
            continue
        alone, shared = rows[kind]
        if slowdown is None and shared is not None and shared.runs >= min_runs:
            slowdown = max(0.0, 1.0 / max(shared.speed, 1e-3) - 1.0)
            notes.append(f"{kind} history, {shared.runs} shared runs")
        if power is None and alone is not None and alone.runs >= min_runs:
            power = alone.power_w
            notes.append(f"{kind} history, {alone.runs} runs alone")
    if slowdown is None and power is None:
        return None
    return Prediction(slowdown, power, "; ".join(notes))


def _row(
    kind: str, key: str, shared: int, seconds: float, util: float, power: float, speed: float
) -> Sequence[object]:
    return (kind, key, shared, seconds, util * seconds, power * seconds, speed * seconds)
