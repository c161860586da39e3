"""2D-Gittins index over an empirical GPU-time distribution (Tiresias).

index(a) = max over D of P(S - a <= D | S > a) / E[min(S - a, D) | S > a]

S is a job's total GPU-time, drawn from the completed jobs' history; a is the attained
service. For an empirical distribution the maximum is reached at a quantum D ending on a
sample, so the exact index is a scan over the survivors. A job that has outlived every
sample gets index 0 (nothing suggests it will finish soon).

Optionally the distribution is conditioned on the job's GPU count (`gpu_class`: 1, 2,
3-4, 5-8, 9-16, ...): each class with enough completed jobs gets its own table, the
others read the pooled one.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol


def gittins_index(sorted_samples: Sequence[float], attained: float) -> float:
    """Exact Gittins index of a job with `attained` GPU-seconds; samples sorted ascending."""
    return scan_index(sample_groups(sorted_samples), len(sorted_samples), attained)


def sample_groups(sorted_samples: Sequence[float]) -> tuple[list[float], list[int]]:
    """The distinct sample values and, for each, the index just past its last copy."""
    values: list[float] = []
    ends: list[int] = []
    for j, v in enumerate(sorted_samples):
        if values and values[-1] == v:
            ends[-1] = j + 1
        else:
            values.append(v)
            ends.append(j + 1)
    return values, ends


def scan_index(groups: tuple[list[float], list[int]], n: int, attained: float) -> float:
    """`gittins_index` from `sample_groups` of `n` sorted samples: the scan over the
    survivors' distinct values (the lazy per-kind tables share it, policy/lazy_gittins.py)."""
    values, ends = groups
    g = bisect.bisect_right(values, attained)  # first surviving value (S > a)
    k = ends[g - 1] if g else 0  # first survivor
    best = 0.0
    done_sum = 0.0  # sum of (s_i - a) over survivors that finish within D
    j = k
    for v, end in zip(values[g:], ends[g:]):
        d = v - attained
        while j < end:  # ties finish together
            done_sum += d
            j += 1
        expected = done_sum + (n - j) * d  # m x E[min(S - a, D)]
        if expected > 0:
            r = (j - k) / expected
            if r > best:
                best = r
    return best


def whole_job_indices(sorted_samples: Sequence[float], points: Sequence[float]) -> list[float]:
    """The Gittins index of a job that, once started, runs to its end, at each attained
    service in `points`: the only quantum is D = infinity, so the index is
    1 / E[S - a | S > a] (Smith's rule on the expected remaining GPU-time). It is the
    right order when nothing is preempted: Tiresias' best-quantum index rewards a chance
    of finishing early that only preemption can cash in."""
    n = len(sorted_samples)
    suffix = [0.0] * (n + 1)  # suffix[i] = sum of samples[i:]
    for i in range(n - 1, -1, -1):
        suffix[i] = suffix[i + 1] + sorted_samples[i]
    out = []
    for a in points:
        k = bisect.bisect_right(sorted_samples, a)
        left = suffix[k] - (n - k) * a
        out.append((n - k) / left if k < n and left > 0 else 0.0)
    return out


def gpu_class(gpus: int) -> int:
    """Class of a GPU count: 0 for 1 GPU, k for 2^(k-1) < gpus <= 2^k."""
    return (gpus - 1).bit_length() if gpus > 1 else 0


def class_label(cls: int) -> str:
    hi = 1 << cls
    lo = hi // 2 + 1
    return f"{hi} GPU" + ("s" if hi > 1 else "") if lo >= hi else f"{lo}-{hi} GPUs"


def default_grid(start: float, per_decade: int, top: float) -> list[float]:
    """0, then geometric points from `start` up to past `top` (where every index is 0).

    Points are computed from the exponent and rounded (to whole GPU-seconds from 10 on,
    else 9 significant digits). Repeated multiplication put them an ulp below round
    numbers (5999.999999999999): a completed job of exactly 6000 GPU-s, as sacct reports
    them, then survived the point by 1e-12 and gave its whole cell an index of ~1e12."""
    grid = [0.0]
    ratio = 10 ** (1.0 / per_decade)
    k = 0
    while True:
        x = start * 10 ** (k / per_decade)
        x = float(round(x)) if x >= 10 else float(f"{x:.9g}")
        if x > top * ratio:
            return grid
        if x > grid[-1]:
            grid.append(x)
        k += 1


# Jobs are ordered by the index rounded to this many steps per decade (26 % apart), so
# indices that differ by a hair rank as equals (FIFO among them). Without it, two
# GPU-class tables of nearly the same distribution swap every job of one class with
# every job of the other whenever a completion nudges either table: 21,330 of 50,000
# pending jobs rewritten after 5 completions in benchmarks/bench_service.py.
INDEX_STEPS_PER_DECADE = 10


def ranking_index(index: float) -> float:
    """The index as jobs are ordered by it: rounded on a log scale (0 stays 0)."""
    if index <= 0.0 or not math.isfinite(index):
        return index
    return 10 ** (round(math.log10(index) * INDEX_STEPS_PER_DECADE) / INDEX_STEPS_PER_DECADE)


class KindChoice(Protocol):
    """The table one kind of job reads (policy/kinds.py `Choice`): `table` untruncated,
    `pick` the one for an attained service (truncated at `cap` below its time limit)."""

    table: GittinsTable
    cap: float | None

    @property
    def label(self) -> str: ...

    def pick(self, attained: float) -> GittinsTable: ...


class KindChooser(Protocol):
    """The per-kind tables a `GittinsTable` may carry (policy/kinds.py `KindTables`),
    as the ranking reads them: declared here so that this module imports neither kinds
    nor lazy_gittins, which build on it."""

    def choose(
        self, gpus: int, user: str, name: str, account: str, time_limit_s: float | None
    ) -> KindChoice: ...


@dataclass(frozen=True)
class GittinsTable:
    """The index tabulated on a grid of attained service, read as a step function.

    Built once per history refresh; `index(a)` is then a bisect. The service and the
    simulator both rank from the same table, so they agree on every decision.
    """

    grid: tuple[float, ...]
    values: tuple[float, ...]
    samples: int
    # per GPU class (`gpu_class`) with enough samples: its own table; None: pooled only
    classes: dict[int, GittinsTable] | None = field(default=None, compare=False)
    # per job kind and time limit (policy.kinds); None: classes and pooled only
    kinds: KindChooser | None = field(default=None, compare=False, repr=False)
    ranked: tuple[float, ...] = field(default=(), init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ranked", tuple(ranking_index(v) for v in self.values))

    @classmethod
    def from_samples(
        cls,
        samples: Sequence[float],
        start: float = 60.0,
        per_decade: int = 4,
        whole: bool = False,
    ) -> GittinsTable:
        """The table over completed jobs' GPU-seconds; `whole`: `whole_job_index`."""
        ordered = sorted(float(s) for s in samples if s > 0 and math.isfinite(s))
        if not ordered:
            return cls(grid=(0.0,), values=(0.0,), samples=0)
        grid = default_grid(start, per_decade, ordered[-1])
        if whole:
            values = whole_job_indices(ordered, grid)
        else:
            groups = sample_groups(ordered)
            values = [scan_index(groups, len(ordered), a) for a in grid]
        return cls(grid=tuple(grid), values=tuple(values), samples=len(ordered))

    @classmethod
    def from_history(
        cls,
        history: Sequence[tuple[int | None, float]],
        start: float = 60.0,
        per_decade: int = 4,
        min_class_samples: int = 200,
    ) -> GittinsTable:
        """Pooled table over (gpus, gpu_s) samples plus one per GPU class with at least
        `min_class_samples` samples (gpus None: the sample counts in the pooled one only)."""
        pooled = cls.from_samples([s for _, s in history], start, per_decade)
        by: dict[int, list[float]] = {}
        for g, s in history:
            if g is not None and g > 0:
                by.setdefault(gpu_class(g), []).append(s)
        classes: dict[int, GittinsTable] = {}
        for c, samples in by.items():
            if len(samples) >= min_class_samples:
                table = cls.from_samples(samples, start, per_decade)
                if table.samples >= min_class_samples:
                    classes[c] = table
        return cls(pooled.grid, pooled.values, pooled.samples, classes)

    def for_gpus(self, gpus: int) -> GittinsTable:
        """The table a job with `gpus` GPUs reads: its class's, else the pooled one."""
        if self.classes is None:
            return self
        return self.classes.get(gpu_class(gpus), self)

    def cell(self, attained: float) -> int:
        return bisect.bisect_right(self.grid, attained) - 1

    def index(self, attained: float) -> float:
        return self.values[self.cell(attained)]

    def next_change_gpu_s(self, attained: float) -> float:
        """Attained service at which the step function next changes (inf if never)."""
        c = self.cell(attained)
        return self.grid[c + 1] if c + 1 < len(self.grid) else math.inf

    def step(self, attained: float) -> tuple[float, float]:
        """`ranking_index(index(attained))` and `next_change_gpu_s(attained)`, one bisect."""
        c = bisect.bisect_right(self.grid, attained) - 1
        return self.ranked[c], self.grid[c + 1] if c + 1 < len(self.grid) else math.inf
