"""The per-kind tables computed cell by cell give exactly `GittinsTable.from_samples`."""

from __future__ import annotations

import math
import random

import pytest

from slurm_ext.policy import GittinsTable
from slurm_ext.policy.lazy_gittins import LazyGittinsTable, SortedSamples


def _samples(seed: int) -> list[float]:
    rng = random.Random(seed)
    out = [round(rng.lognormvariate(8, 2), rng.choice((0, 3))) for _ in range(400)]
    out += [600.0] * 7 + [math.inf, 0.0, -5.0]  # ties, an infinite one, ignored ones
    rng.shuffle(out)
    return out


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("infinite", [True, False])
def test_every_cell_and_bound_as_from_samples(seed: int, infinite: bool) -> None:
    samples = [s for s in _samples(seed) if infinite or math.isfinite(s)]
    pre = SortedSamples(samples)
    finite_max = max(s for s in samples if math.isfinite(s))
    for cap in (None, 1.0, 599.9, 600.0, 600.1, 3000.0, finite_max, finite_max * 2):
        capped = samples if cap is None else [x if x < cap else cap for x in samples]
        want = GittinsTable.from_samples(capped, 30.0, 4)
        got = pre.table(cap, 30.0, 4)
        assert isinstance(got, LazyGittinsTable)
        assert got.grid == want.grid and got.samples == want.samples
        # read out of order, each cell twice: the values and what jobs are ordered by
        for i in [*range(len(want.grid) - 1, -1, -1), 0, -1]:
            assert got.values[i] == want.values[i]
            assert got.ranked[i] == want.ranked[i]
        for a in (0.0, 59.0, 600.0, 1e4, 1e9):
            assert got.step(a) == want.step(a) and got.index(a) == want.index(a)
        assert tuple(got.values) == want.values


def test_nothing_to_tabulate_falls_back() -> None:
    assert SortedSamples([math.inf, 0.0]).table(None, 60.0, 4) is None
    assert SortedSamples([5.0, 10.0]).table(-1.0, 60.0, 4) is None
    assert SortedSamples([5.0, 10.0]).table(math.nan, 60.0, 4) is None


def test_grid_prefixes_as_default_grid() -> None:
    from slurm_ext.policy.gittins import default_grid
    from slurm_ext.policy.lazy_gittins import _grid

    rng = random.Random(5)
    tops = [0.0, 1.0, 59.9, 60.0, 1e3, 1e17, *(rng.lognormvariate(9, 4) for _ in range(300))]
    for start, per_decade in ((60.0, 4), (7.5, 3), (60.0, 10)):
        for top in tops:
            assert _grid(start, per_decade, top) == tuple(default_grid(start, per_decade, top))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("classes", ["gpus", "pooled"])
def test_build_table_lazy_gives_the_same_tables(seed: int, classes: str) -> None:
    """`build_table(..., lazy=True)` (the simulator's refreshes): the pooled and class
    tables' cells computed as read, the same values and index per kind as built whole."""
    from slurm_ext.core.model import Completed
    from slurm_ext.policy import PolicyConfig, build_table

    rng = random.Random(seed)
    history = [
        Completed(
            g, s * g, f"u{rng.randrange(4)}", f"n{rng.randrange(3)}", "", rng.choice([None, 3600.0])
        )
        for s, g in zip(_samples(seed), rng.choices([1, 2, 4, 8], k=410), strict=True)
    ]
    cfg = PolicyConfig(gittins_classes=classes, gittins_class_min_samples=50)
    want, got = build_table(history, cfg), build_table(history, cfg, lazy=True)
    assert want is not None and got is not None and isinstance(got, LazyGittinsTable)
    pairs = [(got, want)] + [(got.for_gpus(g), want.for_gpus(g)) for g in (1, 2, 4, 8)]
    if classes == "gpus":
        assert want.classes and set(got.classes or ()) == set(want.classes)
    for g_table, w_table in pairs:
        assert g_table.grid == w_table.grid and g_table.samples == w_table.samples
        for a in (0.0, 59.0, 600.0, 1e4, 1e6, 1e9):
            assert g_table.step(a) == w_table.step(a)
        assert tuple(g_table.values) == tuple(w_table.values)
    for c in history[:40]:  # each kind's choice reads the same index
        gc = got.kinds.choose(c.gpus, c.user, c.name, c.account, c.time_limit_s)  # type: ignore[union-attr]
        wc = want.kinds.choose(c.gpus, c.user, c.name, c.account, c.time_limit_s)  # type: ignore[union-attr]
        for a in (0.0, 600.0, 1e5):
            assert gc.pick(a).step(a) == wc.pick(a).step(a)
