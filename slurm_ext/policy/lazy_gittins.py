"""Per-kind Gittins tables whose cells are computed when first read.

With `gittins_time_limit` every bound (time limit x GPUs) of a kind in use gets its own
truncated table: a history refresh rebuilt some 250 of them in the 50,000-job
`bench_sim` runs, each a Python scan of the window (up to `history_window` samples) per
grid point. Yet a waiting job reads one cell (its attained service, mostly 0) and a
running job the few it crosses. These tables give the very values
`GittinsTable.from_samples` computes, a cell at a time, and share the work among a
group's bounds: its samples are sorted once, and at a given attained service `scan_index`'s
scan below any bound is the same, so it runs once (`_scan`) and each bound adds only its
tied tail. tests/test_policy_lazy_gittins.py checks every cell against `from_samples`.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Sequence
from typing import overload

from slurm_ext.policy.gittins import (
    GittinsTable,
    default_grid,
    ranking_index,
    sample_groups,
    scan_index,
)


class _Cells(Sequence[float]):
    """`f(i)` for each cell i, each computed the first time it is read."""

    def __init__(self, cells: int, f: Callable[[int], float]) -> None:
        self._f = f
        self._got: list[float | None] = [None] * cells

    @overload
    def __getitem__(self, i: int) -> float: ...
    @overload
    def __getitem__(self, i: slice) -> list[float]: ...
    def __getitem__(self, i: int | slice) -> float | list[float]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self._got)))]
        v = self._got[i]
        if v is None:
            v = self._got[i] = self._f(i % len(self._got))
        return v

    def __len__(self) -> int:
        return len(self._got)

    def __iter__(self) -> Iterator[float]:
        return (self[i] for i in range(len(self._got)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return repr(tuple(self))


class LazyGittinsTable(GittinsTable):
    """A `GittinsTable` whose `values` (and `ranked`) are `_Cells`."""

    def __post_init__(self) -> None:
        values = self.values
        ranked = _Cells(len(values), lambda i: ranking_index(values[i]))
        object.__setattr__(self, "ranked", ranked)
        object.__setattr__(self, "_ranked_got", ranked._got)

    @classmethod
    def from_samples(
        cls,
        samples: Sequence[float],
        start: float = 60.0,
        per_decade: int = 4,
        whole: bool = False,
    ) -> GittinsTable:
        """`GittinsTable.from_samples`, its cells computed as they are read (so
        `from_history` builds the pooled and class tables this way too): a refresh of
        a long run's history built them whole, yet the ranking reads few of their cells
        (a job reads its kind's table first)."""
        table = None if whole else SortedSamples(samples).table(None, start, per_decade)
        return (
            table
            if table is not None
            else GittinsTable.from_samples(samples, start, per_decade, whole)
        )

    def step(self, attained: float) -> tuple[float, float]:
        """`GittinsTable.step`, reading a computed cell without a method call."""
        grid = self.grid
        c = bisect_right(grid, attained) - 1
        r = self._ranked_got[c]  # type: ignore[attr-defined]
        if r is None:
            r = self.ranked[c]
        return r, grid[c + 1] if c + 1 < len(grid) else math.inf


def _grid(start: float, per_decade: int, top: float) -> tuple[float, ...]:
    """`default_grid(start, per_decade, top)`: a prefix of one long grid per (start,
    per_decade), the same points (each computed as there), cut where `default_grid` stops:
    a table per bound otherwise recomputed its grid point by point."""
    points = _GRIDS.get((start, per_decade))
    if points is None or points[-1] <= top * 10 ** (1.0 / per_decade):
        points = _GRIDS[(start, per_decade)] = default_grid(start, per_decade, max(top, 1e15))
    ratio = 10 ** (1.0 / per_decade)
    return tuple(points[: bisect_right(points, top * ratio)])


_GRIDS: dict[tuple[float, int], list[float]] = {}


class SortedSamples:
    """One group's GPU-times sorted once, for its tables at every bound."""

    def __init__(self, samples: Sequence[float]) -> None:
        # as `from_samples` reads them: positive; infinite ones only count once capped
        self.ordered = sorted(float(s) for s in samples if s > 0)
        self.finite = [s for s in self.ordered if math.isfinite(s)]
        self._finite_groups: tuple[list[float], list[int]] | None = None
        self._all_groups: tuple[list[float], list[int]] | None = None
        self._scans: dict[float, tuple[int, array[float], array[float]]] = {}

    def table(self, cap: float | None, start: float, per_decade: int) -> GittinsTable | None:
        """`GittinsTable.from_samples` of the samples, capped at `cap` if given (values
        at or above it count as `cap`); None where the plain build is needed (nothing to
        tabulate, or a bound that is not a positive finite number)."""
        if cap is None:
            if not self.finite:
                return None
            if len(self.finite) == len(self.ordered):  # `scan_index` is the shared scan's end
                if self._all_groups is None:
                    self._all_groups = sample_groups(self.ordered)
                grid = _grid(start, per_decade, self.ordered[-1])
                cells = _Cells(len(grid), lambda i: self._scan(grid[i])[1][-1])
                return LazyGittinsTable(grid=grid, values=cells, samples=len(self.ordered))  # type: ignore[arg-type]
            if self._finite_groups is None:
                self._finite_groups = sample_groups(self.finite)
            groups, n, top = self._finite_groups, len(self.finite), self.finite[-1]
        else:
            cap = float(cap)
            if not (cap > 0 and math.isfinite(cap)) or not self.ordered:
                return None
            if self._all_groups is None:
                self._all_groups = sample_groups(self.ordered)
            values = self._all_groups[0]
            g = bisect_left(values, cap)  # the distinct values below the cap keep theirs
            if g < len(values):  # the rest become `cap`, all of them tied
                grid = _grid(start, per_decade, cap)
                cells = _Cells(len(grid), lambda i: self._capped(g, cap, grid[i]))
                return LazyGittinsTable(grid=grid, values=cells, samples=len(self.ordered))  # type: ignore[arg-type]
            groups, n, top = self._all_groups, len(self.ordered), values[-1]
        grid = _grid(start, per_decade, top)
        cells = _Cells(len(grid), lambda i: scan_index(groups, n, grid[i]))
        return LazyGittinsTable(grid=grid, values=cells, samples=n)  # type: ignore[arg-type]

    def _capped(self, g: int, cap: float, attained: float) -> float:
        """`scan_index` of the samples capped at `cap` (the distinct values from the g-th on
        become `cap`): the scan below the cap is the uncapped one, shared by every cap
        (`_scan`); only the tied tail at `cap` is added here, sample by sample as there."""
        if attained >= cap:
            return 0.0  # no sample survives
        values, ends = self._all_groups  # type: ignore[misc]
        n = len(self.ordered)
        g0, best_before, sum_before = self._scan(attained)
        k = ends[g0 - 1] if g0 else 0  # first survivor
        best, done_sum = best_before[g - g0], sum_before[g - g0]
        j = ends[g - 1] if g else 0
        d = cap - attained
        for _ in range(n - j):
            done_sum += d
        j = n
        expected = done_sum + (n - j) * d
        if expected > 0:
            r = (j - k) / expected
            if r > best:
                best = r
        return best

    def _scan(self, attained: float) -> tuple[int, array[float], array[float]]:
        """`scan_index`'s scan of all the samples at `attained`, kept: the first surviving
        value g0, and before each value from g0 on the best ratio so far and the running
        sum (as `scan_index` has them when it reaches that value)."""
        got = self._scans.get(attained)
        if got is not None:
            return got
        values, ends = self._all_groups  # type: ignore[misc]
        n = len(self.ordered)
        g0 = bisect_right(values, attained)
        k = ends[g0 - 1] if g0 else 0
        best = done_sum = 0.0
        # arrays of doubles: the same values, without a float object each
        best_before, sum_before = array("d", [best]), array("d", [done_sum])
        j = k
        for v, end in zip(values[g0:], ends[g0:]):  # `scan_index`'s loop, line for line
            d = v - attained
            while j < end:
                done_sum += d
                j += 1
            expected = done_sum + (n - j) * d
            if expected > 0:
                r = (j - k) / expected
                if r > best:
                    best = r
            best_before.append(best)
            sum_before.append(done_sum)
        got = self._scans[attained] = (g0, best_before, sum_before)
        return got
