"""The simulated side of a fidelity check as a distribution (used by fidelity.py).

A live replay and its simulation are both chaotic: one threshold decision or one
reservation taken a wall second earlier moves a whole run (docs/benchmarks.md, "Simulator
fidelity"). So one simulated run cannot say whether one live run is within 10 %.
The ensemble simulates each live run N times, each with a seeded draw of what the replay
cannot control and the simulator takes as fixed; the draws are inputs, the simulator's
defaults and decisions are untouched:

  shift   the phase of every timer against the trace: live, slurmctld's backfill and
          main scheduler's ticks, the service's passes, cons_tres's will-run windows and
          Slurm's whole-second clock start wherever the replay's epoch falls; the
          simulator aligns them all on multiples of their period from trace time 0. The
          whole trace is shifted by a uniform draw below the longest period (JCTs are
          differences, so the shift alone changes nothing but the phases).
  submit  how late each submit reaches slurmctld: each job a lag drawn from those the
          live run's slurmctld log shows (`fidelity_ctld.submit_lags`, 0-0.08 wall s on
          synth2), kept in trace order (the replay runs sbatch one job at a time, so no
          job overtakes an earlier one).
  launch  each job's launch overhead (held minus work) drawn from those the live run's
          slurmctld log shows (`fidelity_ctld.launch_extras`), instead of their mean.
  rank    (opt-in, service modes) live, a new job has SiteFactor 0, below every ranked
          job, until the service's next pass writes its value; the simulator ranks it at
          its submit. The job is kept out of the queue until the next pass tick (the
          simulator's own, at multiples of the pass period after the shift) and its JCT
          counted from its real arrival (`Member.ranked_after`): an upper bound, since
          live backfill may still start an unranked job that delays no one.
A run recorded without its slurmctld log (the oldest kept runs) gets the shift only: its
sacct stamps' spread is the clock's, not the launch's or the submits'.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from slurm_ext.sim.engine import SimConfig
from slurm_ext.sim.simjob import SimJob
from slurm_ext.sim.traces import TraceJob

PERTURBATIONS = ("shift", "submit", "launch", "rank")
DEFAULT = ("shift", "submit", "launch")


@dataclass(frozen=True)
class Draws:
    """What one ensemble member perturbs and with what (all wall seconds but `speedup`)."""

    speedup: float
    which: tuple[str, ...] = DEFAULT
    launch_mean_s: float = 0.0  # the launch overhead the unperturbed jobs carry
    launch_extras_s: tuple[float, ...] = ()  # measured per job; empty: no launch draw
    lags_s: tuple[float, ...] = ()  # measured submit lags; empty: no submit draw

    def __post_init__(self) -> None:
        bad = [w for w in self.which if w not in PERTURBATIONS]
        if bad:
            raise ValueError(
                f"unknown perturbation(s) {', '.join(bad)}: choose from {', '.join(PERTURBATIONS)}"
            )


def timer_span_s(cluster: SimConfig) -> float:
    """The longest timer period of the simulated cluster (trace s): a shift drawn below
    it puts every timer at a uniform phase."""
    return max(
        cluster.bf_willrun_window_s,
        cluster.pass_interval_s,
        cluster.bf_interval_s,
        cluster.clock_s,
        cluster.sched_tick_s,
    )


@dataclass(frozen=True)
class Member:
    """One ensemble member's jobs, and how long each (by job id) waited for the
    service's first pass before the simulator saw it (trace s; `rank` only)."""

    jobs: list[TraceJob]
    ranked_after: dict[int, float]

    def avg_jct_s(self, finished: Sequence[SimJob]) -> float:
        """The avg JCT from each job's arrival, its wait to be ranked included."""
        lag = self.ranked_after
        jct = [(j.finish or 0.0) - j.submit + lag.get(j.id, 0.0) for j in finished]
        return sum(jct) / len(jct)


def perturb(
    jobs: Sequence[TraceJob], cluster: SimConfig, draws: Draws, seed: int, member: int
) -> Member:
    """Member `member`'s jobs: shifted, lagged and with drawn launches as `draws` says.
    Each perturbation has its own random stream, so leaving one out keeps the others'
    draws; the same (seed, member) gives the same draws for every mode (common numbers)."""

    def rng(what: str) -> random.Random:
        return random.Random(f"fidelity-ensemble:{seed}:{member}:{what}")

    shift = rng("shift").uniform(0.0, timer_span_s(cluster)) if "shift" in draws.which else 0.0
    lag, launch = rng("submit"), rng("launch")
    out: list[TraceJob] = []
    ranked_after: dict[int, float] = {}
    every = cluster.pass_interval_s if "rank" in draws.which else 0.0
    prev = float("-inf")
    for j in sorted(jobs, key=lambda j: (j.submit_time, j.job_id)):
        submit = j.submit_time + shift
        if "submit" in draws.which and draws.lags_s:
            submit = max(prev, submit + lag.choice(draws.lags_s) * draws.speedup)
        prev = submit
        duration = j.duration_s
        if "launch" in draws.which and draws.launch_extras_s:
            extra = launch.choice(draws.launch_extras_s) - draws.launch_mean_s
            duration = max(1.0, duration + extra * draws.speedup)
        if every > 0:  # seen at the first pass tick after its arrival
            seen = math.ceil(submit / every) * every
            ranked_after[j.job_id] = seen - submit
            submit = seen
        out.append(replace(j, submit_time=submit, duration_s=duration))
    return Member(out, ranked_after)


@dataclass(frozen=True)
class Spread:
    """An ensemble's avg JCTs and where a live value falls among them."""

    values: tuple[float, ...]

    @property
    def mean(self) -> float:
        return mean(self.values)

    @property
    def low(self) -> float:
        return min(self.values)

    @property
    def high(self) -> float:
        return max(self.values)

    def percentile(self, live: float) -> float:
        """The live value's percentile in the ensemble (0-100; ties count half)."""
        below = sum(v < live for v in self.values)
        ties = sum(v == live for v in self.values)
        return 100.0 * (below + 0.5 * ties) / len(self.values)


def pooled(spreads: Sequence[Spread]) -> Spread:
    """One ensemble of several live runs' ensembles (each run's inputs, one pool)."""
    return Spread(tuple(v for s in spreads for v in s.values))


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)
