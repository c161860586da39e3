"""Pooled verdict on a mode's gain over Slurm alone across kept paired live runs.

    .venv/bin/python -m benchmarks.studies.fidelity_gain users1=DIR1 users1=DIR2 users3=DIR3 ...

Each argument is TRACE=DIR, DIR a fidelity.py --workdir whose DIR/TRACE/<mode>/
row.json holds a live replay's summary for both modes (one paired run: the same trace
replayed once per mode, one after the other). Prints per run the live avg JCTs and the
ratio mode / base, then over all runs: the mean of the ratios, their geometric mean, the
ratio of the means (per trace and pooled; pooled, it weighs traces by their JCT scale),
how many ratios are below 1, and two paired tests on the log ratios against "no gain":
Student's t (two-sided) and the exact sign-flip permutation test, which assumes only
that each run's sign is as likely either way under no effect. Live runs of one trace
are not independent draws of a site's behaviour, and a handful of traces from one
generator is not a population of sites: the tests say whether these runs could be noise
around a ratio of 1, not how large the gain is elsewhere.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PairedRun:
    """One trace replayed live in the base mode and in the compared mode."""

    trace: str
    where: str
    base_s: float  # live avg JCT, base mode (trace s)
    mode_s: float  # live avg JCT, compared mode

    @property
    def ratio(self) -> float:
        return self.mode_s / self.base_s


def read_run(spec: str, base: str, mode: str) -> PairedRun:
    """TRACE=DIR -> the run's two live avg JCTs; a clear error naming what is missing."""
    trace, sep, where = spec.partition("=")
    if not sep or not trace or not where:
        raise SystemExit(f"{spec!r}: expected TRACE=DIR")
    jct = {}
    for m in (base, mode):
        row = Path(where) / trace / m / "row.json"
        if not row.is_file():
            raise SystemExit(f"{spec}: no {row}")
        value = json.loads(row.read_text()).get("avg_jct_s")
        if not isinstance(value, (int, float)) or value <= 0:
            raise SystemExit(f"{row}: avg_jct_s is {value!r}, not a positive number")
        jct[m] = float(value)
    return PairedRun(trace, where, jct[base], jct[mode])


def t_two_sided_p(t: float, df: int) -> float:
    """P(|T| >= |t|) for Student's t with df degrees of freedom: I_x(df/2, 1/2) with
    x = df / (df + t^2), the regularized incomplete beta by its continued fraction."""
    x = df / (df + t * t)
    return _betainc(df / 2.0, 0.5, x)


def _betainc(a: float, b: float, x: float) -> float:
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x > (a + 1.0) / (a + b + 2.0):  # the fraction converges on the other side
        return 1.0 - _betainc(b, a, 1.0 - x)
    # Lentz's method for the continued fraction (Numerical Recipes' betacf)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return front * h / a


def t_statistic(values: Sequence[float]) -> float:
    """One-sample t of the values against 0 (inf when they do not vary)."""
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean / (sd / math.sqrt(n)) if sd > 0 else math.copysign(math.inf, mean)


def sign_flip_p(values: Sequence[float]) -> float:
    """Exact two-sided permutation p: the share of the 2^n sign assignments whose |sum|
    is at least the observed one (n up to 20)."""
    if len(values) > 20:
        raise ValueError(f"{len(values)} runs: the exact test enumerates 2^n, keep n <= 20")
    observed = abs(sum(values)) - 1e-12
    hits = sum(
        abs(sum(s * v for s, v in zip(signs, values))) >= observed
        for signs in itertools.product((1, -1), repeat=len(values))
    )
    return hits / 2 ** len(values)


def report(runs: Sequence[PairedRun], base: str, mode: str) -> str:
    lines = [f"| trace | run | {base} (s) | {mode} (s) | {mode}/{base} |", "|---|---|---|---|---|"]
    lines += [
        f"| {r.trace} | {r.where} | {r.base_s:,.0f} | {r.mode_s:,.0f} | {r.ratio:.3f} |"
        for r in runs
    ]
    ratios = [r.ratio for r in runs]
    logs = [math.log(x) for x in ratios]
    n = len(runs)
    lines.append("")
    for trace in dict.fromkeys(r.trace for r in runs):
        own = [r for r in runs if r.trace == trace]
        lines.append(
            f"{trace}: {len(own)} run(s), ratio of means"
            f" {sum(r.mode_s for r in own) / sum(r.base_s for r in own):.3f},"
            f" mean ratio {sum(r.ratio for r in own) / len(own):.3f}"
        )
    lines.append(
        f"all {n} runs: mean ratio {sum(ratios) / n:.3f},"
        f" geometric mean {math.exp(sum(logs) / n):.3f},"
        f" pooled ratio of means {sum(r.mode_s for r in runs) / sum(r.base_s for r in runs):.3f},"
        f" {sum(x < 1 for x in ratios)} of {n} below 1"
    )
    if n >= 2:
        t = t_statistic(logs)
        p = t_two_sided_p(t, n - 1) if math.isfinite(t) else 0.0
        lines.append(
            f"log ratios: t = {t:.2f} (df {n - 1}), two-sided p = {p:.3f};"
            f" exact sign-flip p = {sign_flip_p(logs):.3f}"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("runs", nargs="+", metavar="TRACE=DIR")
    ap.add_argument("--base", default="slurm")
    ap.add_argument("--mode", default="service")
    args = ap.parse_args()
    print(report([read_run(s, args.base, args.mode) for s in args.runs], args.base, args.mode))
    return 0


if __name__ == "__main__":
    sys.exit(main())
