"""GPU sharing in simulated time: how co-located jobs slow each other, what a GPU draws.

Pure functions of job profiles, so the simulator and tests read the same numbers. Where
each parameter comes from is in docs/simulator.md ("GPU sharing models"); in short:

- Interference. Jobs on one GPU are time-sliced (no MPS, no priorities: what the node
  agent finds on a plain Slurm node). A job alone keeps the GPU busy `util` of the time.
  While the jobs' summed demand fits (<= 1) each mostly fills the others' idle gaps and
  keeps its speed (the premise of Gandiva's packing and AntMan's opportunistic jobs: many
  training jobs leave the GPU idle between kernels); beyond 1 the GPU is oversubscribed and
  each job gets 1/demand of its solo speed. On top, every job loses `overhead` times its
  neighbours' summed utilisation to context switches and cache/bandwidth contention. On
  the H100 (docs/nodeagent.md) two 0.99-utilisation loops ran at 280-380 it/s each against
  690-698 alone, summing to 640-700: 1/1.98 x (1 - 0.05 x 0.99) = 0.48 each, 0.96 summed.
- Power. Idle power plus a dynamic part proportional to the GPU's busy fraction, capped
  at the board limit: the H100 loop drew ~690 W at 0.99 utilisation, alone or with a
  second loop (a busy GPU cannot get busier, so the pair saved nothing).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class JobProfile:
    """What a job asks of one GPU when it runs alone there."""

    util: float  # busy fraction of the GPU, 0..1
    mem: float  # fraction of the GPU's memory it holds, 0..1

    def __post_init__(self) -> None:
        for name in ("util", "mem"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"JobProfile.{name} must be within 0..1, got {v}")


@dataclass(frozen=True)
class Interference:
    overhead: float = 0.05  # speed lost per unit of the neighbours' utilisation (H100 pair)

    def __post_init__(self) -> None:
        if not 0.0 <= self.overhead < 1.0:
            raise ValueError(f"Interference.overhead must be within [0, 1), got {self.overhead}")


@dataclass(frozen=True)
class PowerModel:
    """One GPU's draw as a function of its busy fraction (H100 SXM figures)."""

    idle_w: float = 70.0  # nodeagent's EacoModel default; not measured in this repo
    busy_w: float = 690.0  # the H100 bf16 matmul loop at 0.98-0.99 utilisation
    cap_w: float = 700.0  # H100 SXM board power limit

    def __post_init__(self) -> None:
        if not 0.0 <= self.idle_w <= self.busy_w:
            raise ValueError(f"PowerModel needs 0 <= idle_w <= busy_w, got {self}")
        if self.cap_w < self.idle_w:
            raise ValueError(f"PowerModel.cap_w {self.cap_w} is below idle_w {self.idle_w}")

    def watts(self, busy: float) -> float:
        """Draw at busy fraction `busy` (clamped to 0..1)."""
        b = min(1.0, max(0.0, busy))
        return min(self.cap_w, self.idle_w + (self.busy_w - self.idle_w) * b)


def speeds(jobs: Sequence[JobProfile], model: Interference = Interference()) -> list[float]:
    """Each job's speed relative to running alone, for jobs time-sliced on one GPU."""
    demand = sum(j.util for j in jobs)
    share = 1.0 if demand <= 1.0 else 1.0 / demand
    return [
        max(0.0, share * (1.0 - model.overhead * (demand - j.util))) if len(jobs) > 1 else 1.0
        for j in jobs
    ]


def busy_fraction(jobs: Sequence[JobProfile], job_speeds: Sequence[float]) -> float:
    """The GPU's busy fraction: each job's solo demand scaled by its speed, at most 1."""
    return min(1.0, sum(j.util * s for j, s in zip(jobs, job_speeds, strict=True)))


def memory_fits(jobs: Sequence[JobProfile], limit: float = 1.0) -> bool:
    """Whether the jobs' memory together fits in `limit` of the GPU."""
    return sum(j.mem for j in jobs) <= limit


@dataclass(frozen=True)
class ProfileMix:
    """Seeded draw of job profiles for traces that carry none (Philly, PAI, sacct).

    A share `compute_bound` of jobs keep the GPU busy (util 0.85-1.0, like the H100 loop);
    the rest are input-, communication- or host-bound with util uniform in `low_util`.
    Memory is uniform in `mem`. These are assumptions, not measurements: the Philly
    analysis (Jeon et al., ATC'19) and AntMan report clusters whose GPUs are busy well
    below their allocation, which is all this mix encodes; sites should set their own."""

    compute_bound: float = 0.4
    low_util: tuple[float, float] = (0.2, 0.6)
    mem: tuple[float, float] = (0.1, 0.5)

    jitter: float = 0.05  # per job around its kind's utilisation (batch sizes, inputs)

    def draw(self, kind: str, job_id: int, seed: int) -> JobProfile:
        """One job's profile: its kind's (stable per kind and seed: a model or script
        behaves alike from run to run, which is what learnt admission relies on) plus a
        small per-job jitter."""
        rng = random.Random(f"profile-{seed}-{kind}")
        if rng.random() < self.compute_bound:
            util = rng.uniform(0.85, 1.0)
        else:
            util = rng.uniform(*self.low_util)
        mem = rng.uniform(*self.mem)
        own = random.Random(f"job-{seed}-{job_id}")
        util = min(1.0, max(0.01, util + own.uniform(-self.jitter, self.jitter)))
        return JobProfile(util=util, mem=mem)
