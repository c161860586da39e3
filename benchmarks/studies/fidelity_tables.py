"""fidelity.py's results: one cell per live run and mode, the modes' order, and
with several live runs or an ensemble the comparison of means that the 10 %
target reads (live mean against the simulated ensemble's mean, each side's spread)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.studies.fidelity_ensemble import Spread, mean, pooled

TIE = 0.02  # avg JCTs within 2 % count as a tie when comparing the modes' order
TARGET = 0.10  # the target: simulated avg JCT within 10 % of the live replay


@dataclass
class Cell:
    """One live run of one mode and its simulations (avg JCTs in trace s)."""

    trace: str
    jobs: int
    speedup: float
    mode: str
    run: str  # the live run's directory
    live: float
    sim: float  # the unperturbed simulation
    row: dict = field(default_factory=dict)  # the live row, with sim_min_s / sim_max_s
    ensemble: Spread | None = None


def _cmp(a: float, b: float) -> int:
    """-1, 0 or 1; values within TIE of each other compare equal."""
    if abs(a - b) <= TIE * max(abs(a), abs(b)):
        return 0
    return -1 if a < b else 1


def order(jct: dict[str, float]) -> str:
    """Modes best first, `=` between ties: 'service-requeue < service = slurm'."""
    ranked = sorted(jct, key=jct.__getitem__)
    out = ranked[:1]
    for prev, mode in zip(ranked, ranked[1:]):
        out += ["=" if _cmp(jct[prev], jct[mode]) == 0 else "<", mode]
    return " ".join(out)


def orders_agree(live: dict[str, float], sim: dict[str, float]) -> str:
    """'same' when every pair of modes is ordered alike (ties included); 'yes (up to
    ties)' when no pair is ordered oppositely; else 'NO'."""
    pairs = [(a, b) for a in live for b in live if a < b]
    signs = [(_cmp(live[a], live[b]), _cmp(sim[a], sim[b])) for a, b in pairs]
    if all(x == y for x, y in signs):
        return "same"
    return "NO" if any(x * y < 0 for x, y in signs) else "yes (up to ties)"


def print_runs(cells: Sequence[Cell], work: Path) -> None:
    """One line per live run and mode, then each run's order of modes."""
    ens = any(c.ensemble for c in cells)
    head = (
        "| trace | jobs | speedup | mode | live run | live avg JCT (s) | sim avg JCT (s) |"
        " live/sim | sim range, pass period x0.9-1.1 (s) |"
    )
    if ens:
        head += " ensemble mean (s) | ensemble min-max (s) | live percentile | live/ensemble |"
    head += " live p95 | live util | requeues | timeouts |"
    print()
    print(head)
    print("|" + " --- |" * head.count(" |"))
    for c in cells:
        r = c.row
        line = (
            f"| {c.trace} | {c.jobs} | {c.speedup:.0f} | {c.mode} | {c.run} | {c.live:.0f} |"
            f" {c.sim:.0f} | {c.live / c.sim:.2f} | {r['sim_min_s']:.0f}-{r['sim_max_s']:.0f} |"
        )
        if ens:
            e = c.ensemble
            line += (
                f" {e.mean:.0f} | {e.low:.0f}-{e.high:.0f} | {e.percentile(c.live):.0f} |"
                f" {c.live / e.mean:.2f} |"
                if e
                else " - | - | - | - |"
            )
        line += (
            f" {r['p95_jct_s']:.0f} | {r['gpu_utilization']:.2f} | {r['requeues']} |"
            f" {r['timeouts']} |"
        )
        print(line)
    for (trace, run), group in _group(cells, lambda c: (c.trace, c.run)).items():
        if len(group) > 1:
            live = {c.mode: c.live for c in group}
            sim = {c.mode: c.sim for c in group}
            print(
                f"| {trace} | order of modes, run {run}: live {order(live)}; simulated"
                f" {order(sim)}; agree: {orders_agree(live, sim)} |"
            )
    print(f"\nlogs: {work}")


def summary(cells: Sequence[Cell]) -> list[dict]:
    """Per trace and mode: the live runs, their mean, the simulated side (every run's
    ensemble pooled, else the unperturbed runs), live mean / simulated mean and whether
    that is within the target."""
    out = []
    for (trace, mode), group in _group(cells, lambda c: (c.trace, c.mode)).items():
        live = [c.live for c in group]
        spreads = [c.ensemble for c in group if c.ensemble]
        sim = pooled(spreads) if spreads else Spread(tuple(c.sim for c in group))
        ratio = mean(live) / sim.mean
        out.append(
            {
                "trace": trace,
                "mode": mode,
                "live": live,
                "live_mean": mean(live),
                "sim": sim,
                "percentiles": [c.ensemble.percentile(c.live) for c in group if c.ensemble],
                "ratio": ratio,
                "met": abs(ratio - 1.0) <= TARGET,
            }
        )
    return out


def print_summary(cells: Sequence[Cell]) -> None:
    """The means table (only when some cell has several live runs or an ensemble)."""
    if not any(c.ensemble for c in cells) and len({c.run for c in cells}) < 2:
        return
    print()
    print(
        "| trace | mode | live avg JCT (s), each run | live mean (s) | sim mean (s) |"
        " sim min-max (s) | sims | live percentiles | live mean / sim mean | within 10 % |"
    )
    print("|" + " --- |" * 10)
    rows = summary(cells)
    for s in rows:
        sim: Spread = s["sim"]
        pct = ", ".join(f"{p:.0f}" for p in s["percentiles"]) or "-"
        print(
            f"| {s['trace']} | {s['mode']} | {', '.join(f'{v:.0f}' for v in s['live'])} |"
            f" {s['live_mean']:.0f} | {sim.mean:.0f} | {sim.low:.0f}-{sim.high:.0f} |"
            f" {len(sim.values)} | {pct} | {s['ratio']:.2f} | {'yes' if s['met'] else 'NO'} |"
        )
    for trace, group in _group(rows, lambda s: s["trace"]).items():
        if len(group) > 1:
            live = {s["mode"]: s["live_mean"] for s in group}
            sim = {s["mode"]: s["sim"].mean for s in group}
            print(
                f"| {trace} | order of modes, means: live {order(live)}; simulated"
                f" {order(sim)}; agree: {orders_agree(live, sim)} |"
            )


def _group(items, key) -> dict:
    groups: dict = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return groups
