"""Seeded traces with users who resubmit kinds of jobs (`slurm-ext trace synth`).

`synth.synth_jobs` draws every job independently: nothing about a job's submitter says
how long it runs. Production DL clusters are not like that: most jobs recur, the same
user resubmitting the same kind of job (Helios, Hu et al., SC'21: most GPU jobs repeat
a user's earlier job name, and their past run times predict the next; Philly, Jeon et
al., ATC'19: a few users hold most GPU time, many jobs are repeated hyper-parameter runs
of one model). This model keeps `synth_jobs`' population (the same
GPU counts, the same log-normal run times around a ~25 min median, the same Poisson
arrivals at the offered load) and gives it that structure:

- Users: `users` of them, activity Zipf-like (weight 1 / rank**`user_skew`, skew 1): a
  few heavy users submit most jobs, as both studies report.
- Kinds: each user has 1 + Poisson(`kinds_mean` - 1) kinds (a model, a GPU count, a
  job name), chosen by Zipf-like weights (a user's main experiment recurs most). A kind's
  GPU count is drawn from `synth.GPU_CHOICES` (or another `gpu_choices` mix, to test
  other widths) and its median run time from the
  population log-normal with sigma `SIGMA_BETWEEN`; its jobs then spread around that
  median with sigma `sigma_within` (1.0 by default; SIGMA_BETWEEN**2 + 1.0**2 = SIGMA**2,
  so the population spread stays `synth_jobs`' 2.15). Helios reports repeated jobs'
  run times far tighter than the population's; 1.0 (a factor ~2.7 either way for one
  sigma) is our conservative reading: many repeats fail or are cancelled early.
- One-off jobs: a share `p_oneoff` (0.1, our assumption) of a user's jobs is a fresh
  kind never seen again (a new job name); raise it to test the no-history case.
- Time limits: a user sets one habitual limit per kind, from `timelimits.user_time_limit`
  applied to the kind's 95th-percentile run time (modal round values, a quarter at the
  partition maximum, log-uniform over-estimate: Tsafrir et al. JSSPP'05, Mu'alem and
  Feitelson TPDS'01). A job that would run past its limit is ended there (Slurm's
  TIMEOUT), so every job's limit is >= its run time, as in a real log.
- Checkpointing: a kind checkpoints (may be requeued and resume) with probability
  `p_checkpoint` (0.5). No study gives this share; the benchmark targets read "half
  the jobs preemptible" and "every job", so it is a parameter to vary, not a finding.

The parameters other than the trace's size, load and seed are a `UserModel`. Every draw
comes from one `random.Random(seed)`, so a (n, gpus, load, seed, model) tuple always
writes the same trace.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from slurm_ext.sim.synth import (
    GPU_CHOICES,
    MAX_S,
    MEDIAN_S,
    MIN_S,
    MODELS,
    SIGMA,
    GpuMix,
    check_gpu_mix,
)
from slurm_ext.sim.timelimits import user_time_limit
from slurm_ext.sim.traces import TraceJob

SIGMA_WITHIN = 1.0
SIGMA_BETWEEN = math.sqrt(SIGMA**2 - SIGMA_WITHIN**2)
Z95 = 1.645  # standard normal 95th percentile


@dataclass(frozen=True)
class Kind:
    """One recurring kind of job: what its user resubmits."""

    user: str
    name: str
    model: str
    gpus: int
    median_s: float
    time_limit_s: float
    checkpoint: bool


def _kind(
    rng: random.Random,
    user: str,
    i: int,
    sigma_within: float,
    p_checkpoint: float,
    gpu_choices: GpuMix = GPU_CHOICES,
) -> Kind:
    model = rng.choice(MODELS)
    gpus = rng.choices([g for g, _ in gpu_choices], [w for _, w in gpu_choices])[0]
    between = math.sqrt(max(0.0, SIGMA**2 - sigma_within**2))
    median = min(MAX_S, max(MIN_S, rng.lognormvariate(math.log(MEDIAN_S), between)))
    p95 = median * math.exp(Z95 * sigma_within)
    limit = user_time_limit(min(p95, MAX_S), rng)
    return Kind(user, f"{model}-{i}", model, gpus, median, limit, rng.random() < p_checkpoint)


@dataclass(frozen=True)
class UserModel:
    """The users-and-kinds model's parameters (module docstring)."""

    users: int = 40
    user_skew: float = 1.0  # activity weight 1 / rank**user_skew
    kinds_mean: float = 3.0  # a user's kinds: 1 + Poisson(kinds_mean - 1)
    p_oneoff: float = 0.1  # share of a user's jobs that is a fresh kind never seen again
    sigma_within: float = SIGMA_WITHIN  # a kind's run times' log-normal sigma
    p_checkpoint: float = 0.5  # share of kinds that checkpoint

    def __post_init__(self) -> None:
        if self.users < 1 or self.kinds_mean < 1:
            raise ValueError("users and kinds_mean must be >= 1")
        if not (0.0 <= self.p_oneoff <= 1.0 and 0.0 <= self.p_checkpoint <= 1.0):
            raise ValueError("p_oneoff and p_checkpoint must be within [0, 1]")
        if not 0.0 <= self.sigma_within <= SIGMA:
            raise ValueError(f"sigma_within must be within [0, {SIGMA}]")


DEFAULT_USERS = UserModel()


def synth_user_jobs(
    n: int,
    gpus: int,
    load: float = 1.0,
    seed: int = 0,
    model: UserModel = DEFAULT_USERS,
    gpu_choices: GpuMix = GPU_CHOICES,
) -> list[TraceJob]:
    """`n` jobs from recurring users' kinds (`model`; see the module docstring);
    `gpu_choices` ((GPUs, weight), ...) is the kinds' width mix."""
    check_gpu_mix(gpu_choices)
    sigma_within, p_checkpoint = model.sigma_within, model.p_checkpoint
    rng = random.Random(seed)
    names = [f"user{u:03d}" for u in range(model.users)]
    user_w = [1.0 / (r + 1) ** model.user_skew for r in range(model.users)]
    kinds: dict[str, list[Kind]] = {}
    for u in names:
        k = 1 + _poisson(rng, model.kinds_mean - 1.0)
        kinds[u] = [_kind(rng, u, i, sigma_within, p_checkpoint, gpu_choices) for i in range(k)]
    oneoffs = 0
    picked: list[tuple[Kind, float]] = []
    for _ in range(n):
        u = rng.choices(names, user_w)[0]
        if rng.random() < model.p_oneoff:
            oneoffs += 1
            kind = _kind(rng, u, 1000 + oneoffs, sigma_within, p_checkpoint, gpu_choices)
        else:
            ks = kinds[u]
            kind = rng.choices(ks, [1.0 / (r + 1) for r in range(len(ks))])[0]
        run = rng.lognormvariate(math.log(kind.median_s), sigma_within)
        run = min(MAX_S, max(MIN_S, run), kind.time_limit_s)  # TIMEOUT at the limit
        picked.append((kind, run))
    mean_work = sum(k.gpus * d for k, d in picked) / max(1, n)
    rate = load * gpus / mean_work
    t = 0.0
    jobs = []
    for i, (k, d) in enumerate(picked):
        jobs.append(
            TraceJob(
                job_id=i,
                gpus=k.gpus,
                submit_time=round(t, 3),
                duration_s=round(d, 3),
                model_tag=k.model,
                user=k.user,
                time_limit_s=k.time_limit_s,
                job_name=k.name,
                checkpoint=k.checkpoint,
            )
        )
        t += rng.expovariate(rate)
    return jobs


FLOOD_USER = "flooder"


def with_flooder(
    jobs: list[TraceJob], n: int, bursts: int = 10, median_s: float = 600.0, seed: int = 0
) -> list[TraceJob]:
    """`jobs` plus one user who floods the queue with short 1-GPU jobs: `n` jobs of one
    kind (median `median_s`, sigma 0.3, limit 1 h), in `bursts` equal bursts evenly over
    the middle half of the trace (a hyper-parameter sweep submitted at once, again and
    again). Job ids are renumbered in submit order. A test of fairness: such a user must
    not take the cluster over."""
    if n <= 0 or not jobs:
        return list(jobs)
    rng = random.Random(seed)
    t0, t1 = jobs[0].submit_time, jobs[-1].submit_time
    lo, span = t0 + (t1 - t0) / 4, (t1 - t0) / 2
    flood = []
    for i in range(n):
        b = i * bursts // n
        at = lo + span * (b + 0.5) / bursts
        run = min(3600.0, max(MIN_S, rng.lognormvariate(math.log(median_s), 0.3)))
        flood.append(
            TraceJob(
                -1,
                1,
                round(at, 3),
                round(run, 3),
                "resnet50",
                FLOOD_USER,
                time_limit_s=3600.0,
                job_name="sweep",
                checkpoint=True,
            )
        )
    merged = sorted(list(jobs) + flood, key=lambda j: j.submit_time)
    return [replace(j, job_id=i) for i, j in enumerate(merged)]


def _poisson(rng: random.Random, lam: float) -> int:
    """Knuth's method (small means only)."""
    limit, k, p = math.exp(-lam), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1
