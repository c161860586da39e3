"""Fit a saturating GPU-utilisation-vs-CPU-cores curve and read off the cores it needs.

SAD (SoCC'18): a DL job's GPU throughput rises with the CPU cores feeding it and then
plateaus; the right allocation is the fewest cores that reach the plateau. Two simple
model families, each fitted by least squares over a grid of the shape parameter (the
scale has a closed form), and the one with the lower residual wins:

- knee:  u(c) = P * min(1, c / s)       linear until s cores, flat after (roofline)
- exp:   u(c) = P * (1 - exp(-c / t))    smooth approach to the plateau

Cores needed for a fraction f of the plateau: knee f*s, exp -t*ln(1-f); rounded up.
Pure functions, no numpy: sample counts per key are small.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class SaturationFit:
    model: str  # "knee" or "exp"
    plateau: float  # P, utilisation at saturation
    shape: float  # s (knee) or t (exp), in cores per GPU
    rmse: float
    n: int

    def util(self, cores: float) -> float:
        if self.model == "knee":
            return self.plateau * min(1.0, cores / self.shape)
        return self.plateau * (1.0 - math.exp(-cores / self.shape))

    def cores_for(self, fraction: float) -> float:
        """Cores per GPU at which the curve reaches `fraction` of its plateau (unrounded)."""
        if self.model == "knee":
            return fraction * self.shape
        return -self.shape * math.log(1.0 - fraction)


def _shape(c: float, model: str, shape: float) -> float:
    return min(1.0, c / shape) if model == "knee" else 1.0 - math.exp(-c / shape)


def _fit_one(
    points: Sequence[tuple[float, float]], model: str, grid: Sequence[float]
) -> SaturationFit:
    # Least squares only needs, per distinct core count, the count and mean utilisation
    # (plus the spread within counts, the same for every curve): the grid search costs
    # O(distinct core counts), not O(jobs), so the service's hourly rebuild stays cheap.
    groups: dict[float, list[float]] = {}
    for c, u in points:
        groups.setdefault(c, []).append(u)
    stats = [(c, len(us), sum(us) / len(us)) for c, us in groups.items()]
    within = sum(sum((u - m) ** 2 for u in groups[c]) for c, _, m in stats)
    best: SaturationFit | None = None
    for shape in grid:
        g = [(_shape(c, model, shape), n, m) for c, n, m in stats]
        gg = sum(n * x * x for x, n, _ in g)
        if gg <= 0:
            continue
        plateau = sum(n * x * m for x, n, m in g) / gg
        sse = within + sum(n * (plateau * x - m) ** 2 for x, n, m in g)
        fit = SaturationFit(model, plateau, shape, math.sqrt(sse / len(points)), len(points))
        if best is None or fit.rmse < best.rmse - 1e-12:
            best = fit
    assert best is not None
    return best


def fit_saturation(points: Sequence[tuple[float, float]], max_cores: float) -> SaturationFit:
    """Best saturating fit to (cores_per_gpu, gpu_util) points; shape searched up to 2*max_cores.

    Raises ValueError with fewer than 2 distinct core counts (no curve can be told apart).
    """
    if len({c for c, _ in points}) < 2:
        raise ValueError("need samples at 2 or more distinct core counts")
    top = 2.0 * max(max_cores, max(c for c, _ in points))
    grid = [0.25 * i for i in range(1, int(top / 0.25) + 1)]
    fits = [_fit_one(points, m, grid) for m in ("knee", "exp")]
    return min(fits, key=lambda f: (f.rmse, f.model != "knee"))
