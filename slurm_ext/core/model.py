"""Plain data the whole suite shares: what Slurm holds, what a policy sees, what it decides.

No I/O here. Adapters (Slurm backends, trace readers, the store) build these; the policy
layer consumes them; shells (service, simulator, CLI) move them around.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
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
    """One Slurm node: what it has (GPUs of one type, cores, memory, features), where it
    belongs (partitions) and how it stands (state, what is allocated)."""

    name: str
    state: str = "IDLE"
    cpus: int = 0
    cpus_alloc: int = 0
    gpus: int = 0
    gpus_alloc: int = 0
    gpu_type: str | None = None  # the first type its Gres names (`gpu:a100:4`); None: untyped
    features: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    switch: str | None = None
    memory_mb: int = 0  # RealMemory (0: not known)
    weight: int = 1  # Slurm's Weight: the lowest-weighted nodes are allocated first

    @property
    def gpus_free(self) -> int:
        return max(0, self.gpus - self.gpus_alloc) if self.schedulable else 0

    @property
    def schedulable(self) -> bool:
        bad = ("DOWN", "DRAIN", "FAIL", "MAINT", "NOT_RESPONDING", "POWERED_DOWN", "FUTURE")
        return not any(b in self.state.upper() for b in bad)


@dataclass(frozen=True)
class Partition:
    """One Slurm partition: which nodes it holds and the longest a job may run in it."""

    name: str
    nodes: tuple[str, ...] = ()
    max_time_s: float | None = None  # MaxTime in seconds; None: INFINITE / UNLIMITED
    default: bool = False  # Default=YES: where a job that names no partition goes
    state: str = "UP"  # UP, DOWN, DRAIN or INACTIVE


@dataclass(frozen=True)
class Cluster:
    """The cluster as Slurm describes it: its nodes and its partitions, read from the live
    Slurm (`SlurmClient.cluster()`) or from a site's slurm.conf (`slurm.site_conf`).

    A partition's nodes are its `Partition.nodes` (names a node list does not hold are
    left out); the helpers ignore node and partition state, which changes from one pass
    to the next: `Node.schedulable` says which nodes take work now."""

    nodes: tuple[Node, ...] = ()
    partitions: tuple[Partition, ...] = ()

    @cached_property
    def _by_name(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes}

    def node(self, name: str) -> Node | None:
        return self._by_name.get(name)

    def partition(self, name: str) -> Partition | None:
        return next((p for p in self.partitions if p.name == name), None)

    @property
    def default_partition(self) -> Partition | None:
        """The partition a job that names none goes to (Slurm: the last Default=YES)."""
        defaults = [p for p in self.partitions if p.default]
        return defaults[-1] if defaults else None

    def partition_nodes(self, name: str) -> tuple[Node, ...]:
        """The nodes of partition `name`, in its order; () for an unknown partition."""
        part = self.partition(name)
        if part is None:
            return ()
        return tuple(self._by_name[n] for n in part.nodes if n in self._by_name)

    def gpu_types(self, partition: str) -> tuple[str, ...]:
        """The GPU types the nodes of `partition` have, sorted (untyped GPUs: none)."""
        return tuple(
            sorted({n.gpu_type for n in self.partition_nodes(partition) if n.gpus and n.gpu_type})
        )

    def eligible_nodes(
        self,
        partitions: Sequence[str] = (),
        gpu_type: str | None = None,
        features: Sequence[str] = (),
        excluded: Sequence[str] = (),
        gpus_per_node: int = 0,
    ) -> tuple[Node, ...]:
        """The nodes a job may run on: in one of `partitions` (none named: the default
        partition), with GPUs of `gpu_type` (None: any type), at least `gpus_per_node` of
        them, every one of `features`, and not in `excluded`. Each node once, in partition
        then node order."""
        if not partitions:
            default = self.default_partition
            partitions = (default.name,) if default is not None else ()
        out: dict[str, Node] = {}
        skip, needed = set(excluded), set(features)
        for part in partitions:
            for node in self.partition_nodes(part):
                if (
                    node.name not in skip
                    and (gpu_type is None or (node.gpu_type == gpu_type and node.gpus > 0))
                    and node.gpus >= gpus_per_node
                    and needed.issubset(node.features)
                ):
                    out.setdefault(node.name, node)
        return tuple(out.values())


def split_partitions(value: str) -> tuple[str, ...]:
    """Slurm's comma-separated partition list (`a100,h100`) as a tuple, empty names out."""
    return tuple(p for p in value.split(",") if p)


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
    # as Slurm describes the job (read and carried; the simulator does not model them yet)
    gpu_type: str = ""  # from a typed `gres/gpu:a100=4`; several types joined by ","
    constraints: str = ""  # --constraint, as sacct prints it (`a100|h100`)
    qos: str = ""
    array_job_id: int | None = None  # `JobID` 1234_7: 1234
    array_task_id: int | None = None  # `JobID` 1234_7: 7
    reservation: str = ""
    state: str = ""  # sacct's State (`COMPLETED`, `CANCELLED by 0`, ...)

    @property
    def run_s(self) -> float:
        return self.end_time - self.start_time

    @property
    def partitions(self) -> tuple[str, ...]:
        """`partition` as a tuple: Slurm writes a job submitted to several as `a100,h100`."""
        return split_partitions(self.partition)


@dataclass(frozen=True)
class ClusterSnapshot:
    """Everything one service pass (or one simulator event) decides from."""

    taken_at: float
    jobs: tuple[Job, ...] = ()
    nodes: tuple[Node, ...] = ()


@dataclass(frozen=True)
class JobView:
    """A job's facts: what a scheduling policy may see of it, what a live service would
    know. The policy functions (`policy.key_and_change`, the guards, `rank`) take one.

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

    def running_for(self, ran: float) -> JobView:
        """These facts, taken as a stint started (running, `last_run_s` 0), `ran` seconds
        into that stint: the simulator keeps a job's facts per stint and moves them on
        each time it re-keys the job. A copy of the fields, not `__init__`: a frozen
        dataclass's `__init__` sets each of its 16 fields through `object.__setattr__`,
        four times the instructions of this copy (callgrind)."""
        d = self.__dict__.copy()
        d["attained_gpu_s"] = self.attained_gpu_s + self.gpus * ran
        d["executed_s"] = self.executed_s + ran
        d["last_run_s"] = ran
        new = object.__new__(JobView)
        object.__setattr__(new, "__dict__", d)
        return new


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
