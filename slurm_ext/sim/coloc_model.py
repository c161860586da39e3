"""The pieces of simulated GPU sharing that hold no engine state: its configuration, a
GPU's occupants, a running job's progress segment, and a job's profile and kind keys."""

from __future__ import annotations

from dataclasses import dataclass, field

from slurm_ext.policy import colocation as co
from slurm_ext.policy import opportunistic as opp_rules
from slurm_ext.sim.sharing import Interference, JobProfile, PowerModel, ProfileMix
from slurm_ext.sim.simjob import SimJob
from slurm_ext.sim.traces import TraceJob

GpuKey = tuple[str, int]
UNKNOWN = 10.0  # predicted demand of a job whose kind has no history: placed last
AGENT_SAMPLE_S = 5.0  # the agent's default interval: one sample of a pair it then splits
MAX_ROUNDS = 4  # agent samples at one instant while a sample changes something


@dataclass(frozen=True)
class ShareConfig:
    shards_per_gpu: int = 2  # jobs per GPU at most, the guaranteed one included
    memory_limit: float = 0.9  # an opportunistic job starts only if memory stays below
    on_idle: bool = True  # opportunistic jobs may also take shards of idle GPUs
    seed: int = 0  # job profiles
    mix: ProfileMix = ProfileMix()
    interference: Interference = Interference()
    power: PowerModel = PowerModel()
    agent: co.Policy = co.Policy()  # the agent's co-location policy (EaCO off by default)
    min_runs: int = 3  # history runs before a kind's prediction is used
    learnt_placement: bool = False  # place by the kinds' learnt utilisation (sim only)
    # opportunistic jobs also queue for whole GPUs as in Slurm alone, and start on
    # whichever comes first; False: shards only
    whole_gpus: bool = True
    # widest opportunistic job that may run on shards: a paused job holds every GPU it
    # has, so a wide one paused for one GPU's guaranteed job idles the others (measured:
    # docs/benchmarks.md); wider ones wait for whole GPUs. 0: no limit
    max_shard_gpus: int = 1
    # policy.opportunistic: requeue a job paused this long (trace s; 0: never), from its
    # last checkpoint (SimConfig.checkpoint_interval_s); shards only beside guaranteed
    # jobs whose limit ends before the newcomer's
    max_pause_s: float = 0.0
    ends_before: bool = False
    # what a requeued job avoids (opportunistic.shard_offered): "any" (nothing), the
    # jobs that paused it ("not_beside"), neighbours whose limit ends after its own
    # ("ends_first")
    after_requeue: str = "any"

    def __post_init__(self) -> None:
        if self.shards_per_gpu < 1:
            raise ValueError(f"shards_per_gpu must be >= 1, got {self.shards_per_gpu}")
        if not 0.0 < self.memory_limit <= 1.0:
            raise ValueError(f"memory_limit must be within (0, 1], got {self.memory_limit}")
        if self.after_requeue not in opp_rules.AFTER_REQUEUE:
            raise ValueError(
                f"after_requeue must be one of {opp_rules.AFTER_REQUEUE}, "
                f"got {self.after_requeue!r}"
            )


DEFAULT_SHARE = ShareConfig()


@dataclass
class Gpu:
    guaranteed: SimJob | None = None
    opp: list[SimJob] = field(default_factory=list)


@dataclass
class Track:
    """A running job's progress segment and what its agent would have measured."""

    t0: float  # start of the current segment
    p0: float  # work seconds done at t0
    rate: float  # work seconds per wall second in this segment
    from_t: float  # progress starts no earlier than this (restart overhead)
    speed: float = 1.0
    util: float = 0.0  # its utilisation now (solo demand x speed)
    watts: float = 0.0  # its GPUs' mean power now
    shared: bool = False
    p_start: float = 0.0  # work done when this stint started
    sums: list[float] = field(default_factory=lambda: [0.0] * 7)
    # alone_s, alone_util_s, alone_power_s, shared_s, shared_util_s, shared_power_s, speed_s


def profile_of(t: TraceJob, share: ShareConfig) -> JobProfile:
    kind = t.model_tag or t.job_name or f"job{t.job_id}"
    return share.mix.draw(kind, t.job_id, share.seed)


def kind_keys(t: TraceJob) -> dict[str, str]:
    keys = {"model": t.model_tag or "", "name": t.job_name, "user": t.user}
    return {k: v for k, v in keys.items() if v}


def work_at(tr: Track, now: float) -> float:
    """Work seconds done by `now` in a job's current segment."""
    return tr.p0 + max(0.0, now - max(tr.t0, tr.from_t)) * tr.rate
