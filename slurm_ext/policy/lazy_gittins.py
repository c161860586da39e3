"""Per-kind Gittins tables whose cells are computed when first read.

With `gittins_time_limit` every bound (time limit x GPUs) of a kind in use gets its own
truncated table: a history refresh rebuilt some 250 of them in the 50,000-job
`bench_sim` runs, each a Python scan of the window (up to `history_window` samples) per
grid point. Yet a waiting job reads one cell (its attained service, mostly 0) and a
running job the few it crosses. These tables give the very values
`GittinsTable.from_samples` computes, a cell at a time (`_cell`: the sums `_index` adds,
in the same order, as C-level passes), and share the sort of a group's samples among all
its bounds. tests/test_policy_lazy_gittins.py checks every cell against
`from_samples`.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Sequence
from itertools import accumulate, chain, islice, repeat
from operator import add, mul, sub, truediv
from typing import overload

from slurm_ext.policy.gittins import GittinsTable, _groups, default_grid, ranking_index


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

    def table(self, cap: float | None, start: float, per_decade: int) -> GittinsTable | None:
        """`GittinsTable.from_samples` of the samples, capped at `cap` if given (values
        at or above it count as `cap`); None where the plain build is needed (nothing to
        tabulate, or a bound that is not a positive finite number)."""
        if cap is None:
            if not self.finite:
                return None
            if self._finite_groups is None:
                self._finite_groups = _groups(self.finite)
            samples, groups = self.finite, self._finite_groups
            n = m = len(samples)
            top = samples[-1]
        else:
            cap = float(cap)
            if not (cap > 0 and math.isfinite(cap)) or not self.ordered:
                return None
            if self._all_groups is None:
                self._all_groups = _groups(self.ordered)
            samples, groups = self.ordered, self._all_groups
            values, ends = groups
            n = m = len(samples)
            g = bisect_left(values, cap)  # the distinct values below the cap keep theirs
            if g < len(values):  # the rest become `cap`, all of them tied
                groups = ([*values[:g], cap], [*ends[:g], n])
                m, top = ends[g - 1] if g else 0, cap
            else:
                top = values[-1]
        grid = _grid(start, per_decade, top)
        cells = _Cells(len(grid), lambda i: _cell(samples, m, top, groups, n, grid[i]))
        return LazyGittinsTable(grid=grid, values=cells, samples=n)  # type: ignore[arg-type]


def _cell(
    samples: list[float],
    m: int,
    cap: float,
    groups: tuple[list[float], list[int]],
    n: int,
    attained: float,
) -> float:
    """`gittins._index(groups, n, attained)` where the sorted samples are `samples[:m]`
    then `cap` for the other n - m: the same sums in the same order, as C-level passes.

    There the running sum of (s - a) over the survivors grows one sample at a time and
    each distinct value v's ratio is (samples done) / (sum + (n - done) x (v - a)); here
    the running sums are one `accumulate` and the ratios one `map`, each float operation
    on the same operands as there, so every value is the same to the bit."""
    values, ends = groups
    g = bisect_right(values, attained)  # first surviving value (S > a)
    if g == len(values):
        return 0.0
    k = ends[g - 1] if g else 0  # first survivor
    steps = map(sub, islice(samples, k, m), repeat(attained))
    if m < n:
        steps = chain(steps, repeat(cap - attained, n - m))
    sums = list(accumulate(steps))  # sums[j - k - 1]: the sum over samples k..j-1
    tail_ends, tail_values = ends[g:], values[g:]  # j: the index past a value's last copy
    sums_at = map(sums.__getitem__, map(sub, tail_ends, repeat(k + 1)))
    rest = map(mul, map(sub, repeat(n), tail_ends), map(sub, tail_values, repeat(attained)))
    ratios = map(truediv, map(sub, tail_ends, repeat(k)), map(add, sums_at, rest))
    best = max(ratios)  # each expected sum is > 0: every survivor's s - a is
    return best if best > 0.0 else 0.0
