"""Per-kind Gittins tables whose cells are computed when first read.

With `gittins_time_limit` every distinct bound (time limit x GPUs) of a kind gets its
own truncated table, so a history refresh rebuilt about one table per active job, each
a scan of the whole window (up to `history_window` samples) per grid point: most of a
long simulation's time. Yet a waiting job reads one cell (its attained service, mostly
0) and a running job the few it crosses. These tables give the very values
`GittinsTable.from_samples` computes (the same `_index` on the same sorted samples), a
cell at a time, and share the sort of a group's samples among all its bounds.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Sequence
from typing import overload

from slurm_ext.policy.gittins import GittinsTable, _groups, _index, default_grid, ranking_index


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
            groups, n, top = self._finite_groups, len(self.finite), self.finite[-1]
        else:
            cap = float(cap)
            if not (cap > 0 and math.isfinite(cap)) or not self.ordered:
                return None
            if self._all_groups is None:
                self._all_groups = _groups(self.ordered)
            values, ends = self._all_groups
            n = len(self.ordered)
            g = bisect_left(values, cap)  # the distinct values below the cap keep theirs
            if g < len(values):  # the rest become `cap`, all of them tied
                groups = ([*values[:g], cap], [*ends[:g], n])
                top = cap
            else:
                groups, top = (values, ends), values[-1]
        grid = _grid(start, per_decade, top)
        cells = _Cells(len(grid), lambda i: _index(groups, n, grid[i]))
        return LazyGittinsTable(grid=grid, values=cells, samples=n)  # type: ignore[arg-type]
