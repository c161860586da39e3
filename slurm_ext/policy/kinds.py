"""Conditioned Gittins: a job's GPU-time distribution is the history of jobs like it.

A job that has not run has attained 0, so with one distribution for all (or one per
GPU-count class) every waiting job of a class gets the same index: the order is FIFO.
Most DL jobs recur (Helios, SC'21; Philly, ATC'19): the same user resubmits the same
kind of job, and its past GPU-times predict the next one far better than the
population's. So the index reads the samples of the finest group the job belongs to
that has enough of them, in the order the config lists (`gittins_kinds`, e.g.
user+name -> user+gpus -> user), then the GPU-count class (`gittins_classes = "gpus"`),
then the pooled history. A group below `gittins_kind_min_samples` completions backs off
to the next coarser one; such groups are not even kept, which bounds the tables.

The job's time limit bounds its remaining service (Slurm ends it there): with
`gittins_time_limit` the distribution is truncated at limit x GPUs (samples beyond it
count as finishing at it). This holds while the job's attained service is below that
bound; a requeued job that has passed it (Slurm's limit counts per run) reads the
untruncated table. Attained service still conditions the index as before, so it stays
a Gittins index.

A job reads the finest group with enough samples, whatever its spread.

Group tables are built lazily on first use and cached per (group, bound) until the next
history refresh, their cells computed as they are read (policy/lazy_gittins.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from slurm_ext.core.model import Completed
from slurm_ext.policy.gittins import GittinsTable, class_label, gpu_class
from slurm_ext.policy.lazy_gittins import SortedSamples

FIELDS = ("user", "name", "account", "gpus")
CLASS_LEVEL = "gpus-class"
POOLED = "pooled"


def parse_level(spec: str) -> tuple[str, ...]:
    """`"user+name"` -> ("user", "name"); a clear error for an unknown or repeated field."""
    parts = tuple(p.strip() for p in spec.split("+"))
    bad = [p for p in parts if p not in FIELDS]
    if bad or not parts:
        raise ValueError(
            f"gittins_kinds entry {spec!r}: fields must be {'+'.join(FIELDS)} joined by '+'"
        )
    if len(set(parts)) != len(parts):
        raise ValueError(f"gittins_kinds entry {spec!r} repeats a field")
    return parts


def group_key(
    level: tuple[str, ...], gpus: int | None, user: str, name: str, account: str
) -> tuple | None:
    """The job's group at `level`; None when a field is unknown (empty), so jobs without
    a user or name never share a group by accident."""
    out = []
    for f in level:
        if f == "gpus":
            if not gpus or gpus < 1:
                return None
            out.append(gpu_class(gpus))
        else:
            v = user if f == "user" else name if f == "name" else account
            if not v:
                return None
            out.append(v)
    return tuple(out)


def group_label(level: str, key: tuple) -> str:
    """How explain names a group: "user=alice,name=train", "1 GPU class", "pooled"."""
    if level == POOLED:
        return "pooled"
    if level == CLASS_LEVEL:
        return f"{class_label(key[0])} class"
    fields = level.split("+")
    return ",".join(
        f"{f}={class_label(v) if f == 'gpus' else v}" for f, v in zip(fields, key, strict=True)
    )


@dataclass
class Choice:
    """The table a job of one kind reads, and where it came from."""

    table: GittinsTable  # untruncated
    capped: GittinsTable | None  # truncated at `cap` GPU-seconds (None: no bound applies)
    cap: float | None
    group: tuple[str, tuple]  # (level, key): see `label`

    @property
    def label(self) -> str:
        """How explain names the group (made when read: the simulator never does)."""
        return group_label(*self.group)

    def pick(self, attained: float) -> GittinsTable:
        """The truncated table while the job is below its bound, else the untruncated."""
        if self.capped is not None and self.cap is not None and attained < self.cap:
            return self.capped
        return self.table


@dataclass
class KindTables:
    """Per-group samples from one history window; tables built on demand and cached."""

    levels: tuple[tuple[str, tuple[str, ...]], ...]  # (name, fields), finest first
    base: GittinsTable  # pooled (with per-class tables when gittins_classes = "gpus")
    groups: dict[tuple[str, tuple], list[float]]  # groups with enough samples
    time_limit: bool
    whole: bool  # whole-job index (gittins.whole_job_indices): no preemption
    start: float
    per_decade: int
    max_cached: int = 50_000
    _tables: dict[tuple, GittinsTable] = field(default_factory=dict, repr=False)
    _chosen: dict[tuple, Choice] = field(default_factory=dict, repr=False)
    _sorted: dict[tuple, SortedSamples] = field(default_factory=dict, repr=False)

    @classmethod
    def build(
        cls,
        history: list[Completed],
        base: GittinsTable,
        kinds: list[str],
        min_samples: int,
        time_limit: bool,
        whole: bool,
        start: float,
        per_decade: int,
    ) -> KindTables:
        levels = tuple((spec, parse_level(spec)) for spec in kinds)
        by: dict[tuple[str, tuple], list[float]] = {}
        for c in history:
            if not c.gpu_s > 0:
                continue
            for spec, fields in levels:
                k = group_key(fields, c.gpus, c.user, c.name, c.account)
                if k is not None:
                    by.setdefault((spec, k), []).append(c.gpu_s)
        groups = {g: s for g, s in by.items() if len(s) >= min_samples}
        # the class and pooled levels: samples kept only for truncated or whole-job tables
        if time_limit or whole:
            for c in history:
                if c.gpu_s > 0:
                    if c.gpus and base.classes and gpu_class(c.gpus) in base.classes:
                        groups.setdefault((CLASS_LEVEL, (gpu_class(c.gpus),)), []).append(c.gpu_s)
                    groups.setdefault((POOLED, ()), []).append(c.gpu_s)
        return cls(levels, base, groups, time_limit, whole, start, per_decade)

    def choose(
        self, gpus: int, user: str, name: str, account: str, time_limit_s: float | None
    ) -> Choice:
        """The table for a job of this kind (cached per kind and bound)."""
        cap = time_limit_s * gpus if self.time_limit and time_limit_s and gpus > 0 else None
        ck = (gpus, user, name, account, cap)
        got = self._chosen.get(ck)
        if got is not None:
            return got
        group: tuple[str, tuple] | None = None
        for spec, fields in self.levels:
            k = group_key(fields, gpus, user, name, account)
            if k is not None and (spec, k) in self.groups:
                group = (spec, k)
                break
        own = self.base.for_gpus(gpus) if gpus > 0 else self.base
        fallback = (CLASS_LEVEL, (gpu_class(gpus),)) if own is not self.base else (POOLED, ())
        if group is None or group[0] in (CLASS_LEVEL, POOLED):
            group = group or fallback
            if group[0] == POOLED:
                own = self.base
            table = own if not self.whole else self._table(group, None)
        else:
            table = self._table(group, None)
        capped = None
        samples = self.groups.get(group)
        if cap is not None and samples is not None and cap < max(samples):
            capped = self._table(group, cap)
        else:
            cap = None
        if len(self._chosen) >= self.max_cached:  # bounded: kinds come from users
            self._chosen.clear()
            self._tables.clear()
            self._sorted.clear()
        got = self._chosen[ck] = Choice(table, capped, cap, group)
        return got

    def _table(self, group: tuple[str, tuple], cap: float | None) -> GittinsTable:
        key = (group, cap)
        t = self._tables.get(key)
        if t is None:
            s = self.groups[group]
            if not self.whole:  # the same table, its cells computed as they are read
                pre = self._sorted.get(group)
                if pre is None:
                    pre = self._sorted[group] = SortedSamples(s)
                t = pre.table(cap, self.start, self.per_decade)
            if t is None:
                if cap is not None:
                    s = [x if x < cap else cap for x in s]
                t = GittinsTable.from_samples(s, self.start, self.per_decade, self.whole)
            self._tables[key] = t
        return t
