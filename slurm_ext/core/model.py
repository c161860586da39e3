"""Plain data the whole suite shares: what Slurm holds, what a policy sees, what it decides.

No I/O here. Adapters (Slurm backends, trace readers, the store) build these; the policy
layer consumes them; shells (service, simulator, CLI) move them around.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

from slurm_ext.core.fields import choices

# a job's co-location class (`JobClasses`; policy/colocation.py decides by it)
GUARANTEED = "guaranteed"
OPPORTUNISTIC = "opportunistic"


class JobState(str, Enum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETING = "COMPLETING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    PREEMPTED = "PREEMPTED"
    NODE_FAIL = "NODE_FAIL"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    REQUEUED = "REQUEUED"
    OTHER = "OTHER"

    @classmethod
    def parse(cls, value: str | list[str] | None) -> JobState:
        """Slurm reports a state as a string or (squeue --json >= 23.02) a list of flags."""
        if isinstance(value, list):
            value = value[0] if value else None
        if not value:
            return cls.OTHER
        name = str(value).upper().split()[0]
        try:
            return cls(name)
        except ValueError:
            return cls.OTHER

    @property
    def code(self) -> str:
        """squeue's compact state code (R, PD, CG, ...), as users know it."""
        return _STATE_CODES.get(self, "?")

    @property
    def active(self) -> bool:
        return self in (JobState.PENDING, JobState.RUNNING, JobState.SUSPENDED, JobState.COMPLETING)


_STATE_CODES = {
    JobState.PENDING: "PD",
    JobState.RUNNING: "R",
    JobState.SUSPENDED: "S",
    JobState.COMPLETING: "CG",
    JobState.COMPLETED: "CD",
    JobState.FAILED: "F",
    JobState.CANCELLED: "CA",
    JobState.TIMEOUT: "TO",
    JobState.PREEMPTED: "PR",
    JobState.NODE_FAIL: "NF",
    JobState.OUT_OF_MEMORY: "OOM",
    JobState.REQUEUED: "RQ",
}


@dataclass(frozen=True)
class Job:
    """One Slurm job as the suite sees it, whichever backend read it."""

    job_id: int
    name: str = ""
    user: str = ""
    account: str = ""
    partition: str = ""
    qos: str = ""
    state: JobState = JobState.PENDING
    reason: str = ""
    priority: int = 0
    nice: int = 0
    site_factor: int = 0
    gpus: int = 0  # GPUs for the whole job (all nodes)
    gpus_per_node: int = 0  # 0 when the request is per job rather than per node
    gpu_type: str | None = None
    num_nodes: int = 1
    cpus: int = 1
    submit_time: float = 0.0
    start_time: float | None = None
    end_time: float | None = None
    time_limit_s: float | None = None
    nodes: tuple[str, ...] = ()  # allocated nodes (running) or empty
    required_nodes: tuple[str, ...] = ()
    excluded_nodes: tuple[str, ...] = ()
    comment: str = ""
    admin_comment: str = ""
    held: bool = False
    requeue: bool = False
    tres_per_node: str = ""
    cpus_per_tres: str = ""
    # times Slurm requeued it (a requeue also moves its SubmitTime); None: not known
    restart_count: int | None = None

    @property
    def pending(self) -> bool:
        return self.state == JobState.PENDING

    @property
    def running(self) -> bool:
        return self.state in (JobState.RUNNING, JobState.COMPLETING)


@dataclass(frozen=True)
class Node:
    name: str
    state: str = "IDLE"
    cpus: int = 0
    cpus_alloc: int = 0
    gpus: int = 0
    gpus_alloc: int = 0
    gpu_type: str | None = None
    features: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    switch: str | None = None

    @property
    def gpus_free(self) -> int:
        return max(0, self.gpus - self.gpus_alloc) if self.schedulable else 0

    @property
    def schedulable(self) -> bool:
        bad = ("DOWN", "DRAIN", "FAIL", "MAINT", "NOT_RESPONDING", "POWERED_DOWN", "FUTURE")
        return not any(b in self.state.upper() for b in bad)


@dataclass(frozen=True)
class CompletedJob:
    """A job that ran and ended, as Slurm's accounting has it (sacct or pyslurm.db): a
    sample of the Gittins history and a row of a sacct trace. Times are unix seconds."""

    job_id: int
    gpus: int
    submit_time: float
    start_time: float
    end_time: float
    user: str = ""
    partition: str = ""
    name: str = ""
    account: str = ""
    time_limit_s: float | None = None  # None: unlimited or not known
    comment: str = ""

    @property
    def run_s(self) -> float:
        return self.end_time - self.start_time


@dataclass(frozen=True)
class ClusterSnapshot:
    """Everything one service pass (or one simulator event) decides from."""

    taken_at: float
    jobs: tuple[Job, ...] = ()
    nodes: tuple[Node, ...] = ()


@dataclass(frozen=True)
class JobView:
    """What a scheduling policy may see of a job: what a live service would know.

    `true_duration_s` exists only for oracle baselines (SJF/SRTF) in the simulator;
    non-oracle policies must never read it.
    """

    job_id: int
    gpus: int
    submit_time: float
    attained_gpu_s: float = 0.0  # 2D attained service: GPUs x executed seconds
    executed_s: float = 0.0  # wall seconds run so far (all stints)
    running: bool = False
    last_run_s: float = 0.0  # length of the most recent run stint (for the starvation guard)
    waiting_since: float | None = None  # when it last became pending (submit or preemption)
    user: str = ""
    partition: str = ""
    model_tag: str | None = None
    true_duration_s: float | None = None
    # attained service when a guard's promotion let this job start (the starvation guard,
    # or the wait guard with `wait_guard_keep`); while that stint lasts its queue counts
    # only service since then, and it keeps the wait guard's rank a while (None: not
    # promoted)
    promoted_at_gpu_s: float | None = None
    # its kind, for the conditioned Gittins index (policy/kinds.py); "" / None: unknown
    job_name: str = ""
    account: str = ""
    time_limit_s: float | None = None


@dataclass(frozen=True)
class Decision:
    """The policy's verdict for one job; rank 0 runs first."""

    job_id: int
    rank: int
    queue: int = 0
    index: float = 0.0  # Gittins index or other score; higher is better for Gittins
    promoted: bool = False  # the starvation guard lifted it
    guarded: bool = False  # the wait guard ("promote") lifts it while it waits
    reason: str = ""
    group: str = ""  # the history group the Gittins index came from ("" if none)
    group_samples: int = 0  # completed jobs in that group


@dataclass(frozen=True)
class Placement:
    """A candidate node set for a pending job and why it scored as it did."""

    job_id: int
    nodes: tuple[str, ...]
    score: float
    detail: dict[str, float] = field(default_factory=dict)


class Completed(NamedTuple):
    """One completed job as the history keeps it: its kind and its GPU-time."""

    gpus: int | None
    gpu_s: float
    user: str = ""
    name: str = ""
    account: str = ""
    time_limit_s: float | None = None


@dataclass(frozen=True)
class JobClasses:
    """Which jobs are opportunistic (may share a GPU, paused when they slow a guaranteed
    job) and which guaranteed, from Slurm's QOS and partition, never from the job's own
    word: the classes file both the node agents and the service read
    (`slurm_ext.core.classes`; `policy.colocation.classify` applies it). QOS decides
    first, then partition (a job in several: opportunistic if one is listed so), then
    `default_class`."""

    opportunistic_qos: tuple[str, ...] = ("opportunistic", "scavenger")
    guaranteed_qos: tuple[str, ...] = ()
    opportunistic_partitions: tuple[str, ...] = ()
    guaranteed_partitions: tuple[str, ...] = ()
    default_class: str = choices(GUARANTEED, OPPORTUNISTIC, default=GUARANTEED)

    def __post_init__(self) -> None:
        for kind in ("qos", "partitions"):
            both = set(getattr(self, f"opportunistic_{kind}")) & set(
                getattr(self, f"guaranteed_{kind}")
            )
            if both:
                raise ValueError(
                    f"opportunistic_{kind} and guaranteed_{kind} both list "
                    f"{', '.join(sorted(both))}: a {kind.rstrip('s')} has one class"
                )
