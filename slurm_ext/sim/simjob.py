"""The simulated cluster's settings and one simulated job's state."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from slurm_ext.core.attained import Attained
from slurm_ext.core.model import Completed, JobView
from slurm_ext.sim.bfinputs import Candidate
from slurm_ext.sim.cpus import DEFAULT_KNEES
from slurm_ext.sim.traces import TraceJob

SCHEDULERS = ("slurm", "greedy", "strict")
WILLRUN_STARTS = ("nodes", "batch")  # bf_willrun_start: Slurm 25.11 / 22.05 (to 23.x)


@dataclass
class SimConfig:
    """The simulated cluster and its mechanics.

    restart_overhead_s: wall time a preempted job loses when it restarts (checkpoint
        reload, warm-up); counted as GPU time held, not as progress.
    requeue_delay_s: how long a preempted job stays ineligible before it may start again,
        holding nothing: Slurm sets a requeued batch job's begin time to now +
        cred_expire + 1 s (121 s by default; 6 s on the test harness, i.e. 6 x speedup
        trace seconds in a live replay). 0: it may restart at once.
    history_refresh: rebuild the Gittins table after this many completions at most
        (sooner while the history is small: every 25% growth).
    history: jobs completed before the trace starts (e.g. a YARN sample): GPU-seconds,
        (GPUs, GPU-seconds) for per-GPU-class Gittins tables (`gittins_classes`), or
        `Completed` records with their kind for per-kind tables (`gittins_kinds`).
    scheduler: who starts pending jobs, in the policy's priority order (docs/simulator.md):
        "slurm": Slurm's main scheduler (at events, or `sched_tick_s`: strict order,
            stops at the first job that does not fit) plus its sched/backfill pass every bf_interval_s
            (reservations from time limits, `sim.backfill`); jobs die at their limit.
        "greedy": one pass per event batch, lower-ranked jobs that fit start past a
            blocked one (first fit, no reservation, no time limits).
        "strict": the pass stops at the first job that does not fit (sched/builtin).
    bf_window_s, bf_max_job_test, bf_interval_s, bf_resolution_s: Slurm's bf_window (in
        seconds here), bf_max_job_test, bf_interval and bf_resolution ("slurm" only).
    bf_willrun_window_s: cons_tres's will-run window ("slurm" only): backfill learns a
        blocked job's start from running jobs taken off in batches of this window,
        doubling (`sim.willrun`); Slurm's is 30 wall s, so 30 trace s at a site and 30 x
        X in a replay at speedup X. 0 (the default): the earliest exact start, the
        simpler model (30 moves a 2,000-job run: docs/simulator.md).
    sched_tick_s: the main scheduler's tick ("slurm" only; 0, the default: none). Slurm
        runs its main scheduler at once only when a job ends (the epilog-complete RPC);
        a submit, a priority update or a held job's release only asks for a run, which
        slurmctld's background loop makes at its next whole wall second. So when > 0, a
        batch of events without a completion or a policy tick (arrivals, requeued jobs
        released, key changes) waits for the next multiple of this to run the strict
        pass (`sim.scheduler`); 1 wall s x speedup in a live replay.
    bf_willrun_start: the start cons_tres reports after a batch: "nodes" (Slurm 25.11)
        the last end of a removed job on the nodes it chose, "batch" (Slurm 22.05, the
        replay's, to at least 23.x) the end of the batch's last job.
    fit_cores: cons_tres's node choice on free cores ("slurm" only; 0, the default:
        best fit on free GPUs, `policy.choose_gpus`). When > 0, the cores per node: a
        one-node or whole-node job starts on the nodes Slurm's `_eval_nodes_consec`
        picks by free cores, each running job holding one core per node as a replay's
        jobs do (`sim.corefit`); the replay's nodes have 16.
    bf_whole_nodes: a blocked job's backfill reservation takes its nodes whole ("slurm"
        only; False, the default: only its GPUs). Slurm's backfill map (`node_space` in
        backfill.c) is a node bitmap: a reserved node is off limits to every lower-ranked
        job over the reservation's time, even where GPUs stay free.
    pass_interval_s: how often the policy acts (the service's interval_s): key changes
        and preemption decisions happen at multiples of it; 0: at every event.
    one_preemption_per_pass: preempt for one waiting job per policy pass at most, as the
        service does (it requeues victims for its best waiting job, then waits for its
        next pass); False: for every job of the pass that cannot start.
    max_requeues_per_pass: requeue at most this many victims at a time, worst first, as
        the service's `max_requeues_per_pass` does (2 by default there); when the rule
        picks more, the waiting job does not start and the room it left may go to others
        before the next pass. 0: no cap.
    checkpoint_interval_s: a preempted job resumes from its last checkpoint, the last
        multiple of this of its progress (work seconds); the rest is lost work. 0: no loss.
    preemptible_fraction: the share of jobs that may be preempted (opted in to requeue),
        a seeded draw per job (`seed`); None: the trace's checkpoint flags if any job
        has one, else every job.
    cpus_per_node: cores per node; None or 0 leaves CPUs out (GPUs only). When set, a job
        takes its cores per GPU (`TraceJob.cpus_per_gpu`, default the even share
        cpus_per_node // gpus_per_node) on each of its nodes, and runs at
        cpu_speed(model, cores per GPU, cpu_knees).
    cpu_knees: per model, the cores per GPU at which its GPU saturates.
    clock_s: the tick of Slurm's clock in trace seconds, for the history the policy learns
        from: the live service times a finished run from Slurm's StartTime and EndTime,
        whole seconds, so in a replay at speedup X each run is known to X trace seconds
        (a sub-second run may count 0 or 1 s). Each stint is timed so in the Gittins
        history (from start and end truncated to the tick); 0: exact (a site at speedup 1
        is within a second). JCTs stay exact.
    """

    nodes: int = 8
    gpus_per_node: int = 8
    preemptive: bool = True
    placement: str = "consolidate"
    restart_overhead_s: float = 30.0
    requeue_delay_s: float = 0.0
    history_refresh: int = 1000
    history: list[float | tuple[int, float] | Completed] = field(default_factory=list)
    scheduler: str = "slurm"
    cpus_per_node: int | None = None
    cpu_knees: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_KNEES))
    bf_window_s: float = 86400.0
    bf_max_job_test: int = 500
    bf_interval_s: float = 30.0
    bf_resolution_s: float = 60.0
    bf_willrun_window_s: float = 0.0
    bf_willrun_start: str = "nodes"
    sched_tick_s: float = 0.0
    fit_cores: int = 0
    bf_whole_nodes: bool = False
    pass_interval_s: float = 0.0
    one_preemption_per_pass: bool = False
    max_requeues_per_pass: int = 0
    checkpoint_interval_s: float = 0.0
    preemptible_fraction: float | None = None
    seed: int = 0
    clock_s: float = 0.0

    @property
    def requeue_restart_s(self) -> float:
        """What a requeue delays a job by before it runs again: the restart overhead plus
        Slurm's hold (the requeue cost counts both, in the service and the simulator)."""
        return self.restart_overhead_s + self.requeue_delay_s

    def __post_init__(self) -> None:
        if self.scheduler not in SCHEDULERS:
            raise ValueError(
                f"scheduler must be one of {', '.join(SCHEDULERS)}, got {self.scheduler!r}"
            )
        for name in ("bf_window_s", "bf_interval_s", "bf_resolution_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number of seconds, got {value}")
        for name in (
            "pass_interval_s",
            "checkpoint_interval_s",
            "restart_overhead_s",
            "requeue_delay_s",
            "clock_s",
            "bf_willrun_window_s",
            "sched_tick_s",
        ):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a number of seconds >= 0, got {value}")
        if self.fit_cores < 0:
            raise ValueError(f"fit_cores must be a number of cores >= 0, got {self.fit_cores}")
        for name, models in (
            ("sched_tick_s", "Slurm's main scheduler"),
            ("fit_cores", "cons_tres's node choice"),
            ("bf_whole_nodes", "sched/backfill's reservations"),
        ):
            if getattr(self, name) and self.scheduler != "slurm":
                raise ValueError(
                    f"{name} models {models}: it needs scheduler 'slurm', got {self.scheduler!r}"
                )
        if self.max_requeues_per_pass < 0:
            raise ValueError(
                f"max_requeues_per_pass must be >= 0, got {self.max_requeues_per_pass}"
            )
        if self.bf_willrun_start not in WILLRUN_STARTS:
            raise ValueError(
                f"bf_willrun_start must be one of {', '.join(WILLRUN_STARTS)}, "
                f"got {self.bf_willrun_start!r}"
            )
        if self.bf_max_job_test < 1:
            raise ValueError(f"bf_max_job_test must be >= 1, got {self.bf_max_job_test}")
        f = self.preemptible_fraction
        if f is not None and not (0.0 <= f <= 1.0):
            raise ValueError(f"preemptible_fraction must be within [0, 1], got {f}")


class SimJob:
    """One job's state in a run; `view` is what a live service would know of it."""

    __slots__ = (
        "id", "gpus", "submit", "duration", "model", "user", "partition", "must_consolidate",
        "progress", "attained", "executed", "running", "start", "last_run", "waiting_since",
        "alloc", "slowdown", "overhead", "key", "key_ver", "run_ver", "finish", "stints",
        "preemptions", "first_start", "promoted_at", "cpus_per_gpu", "speed",
        "limit", "preemptible", "killed", "timed_out", "name", "account", "service",
        "candidate", "facts",
    )  # fmt: skip

    def __init__(
        self, t: TraceJob, must_consolidate: bool, cpus_per_gpu: int = 0, speed: float = 1.0
    ) -> None:
        self.id, self.gpus, self.submit, self.duration = (
            t.job_id,
            t.gpus,
            t.submit_time,
            t.duration_s,
        )
        self.model, self.user, self.partition = t.model_tag, t.user, t.partition
        # its kind: what the conditioned Gittins index reads (never its duration)
        self.name, self.account = t.job_name, t.account
        self.must_consolidate = must_consolidate
        self.progress = 0.0  # work seconds done (at full speed)
        # its attained service, the value the live service keeps too (slurm_ext.core.attained);
        # attained, executed, last_run and promoted_at copy it for the engine's hot path
        # and change only with it (begin_stint, end_stint)
        self.service = Attained()
        self.attained = 0.0  # GPU-seconds held, before the current stint
        self.executed = 0.0  # wall seconds held, before the current stint
        self.running = False
        self.start = 0.0
        self.last_run = 0.0
        self.waiting_since = t.submit_time
        self.alloc: list[tuple[str, int]] = []
        self.slowdown = 1.0
        self.overhead = 0.0
        self.key: tuple = ()
        self.key_ver = 0
        self.run_ver = 0
        self.finish: float | None = None
        self.stints = 0
        self.preemptions = 0
        self.first_start: float | None = None
        self.promoted_at: float | None = None
        self.cpus_per_gpu = cpus_per_gpu  # cores per GPU held while running; 0: not counted
        self.speed = speed  # work seconds per wall second from its cores (1: not starved)
        self.limit = t.time_limit_s  # Slurm kills a stint this long ("slurm" scheduler)
        self.preemptible = True  # opted in to requeue
        self.killed = False  # this stint's end event is its time limit
        self.timed_out = False  # killed at its limit (finished, unfinished work)
        self.candidate: Candidate | None = None  # as the backfill pass sees it (made once)
        self.facts: tuple[tuple, JobView] | None = None  # `view`'s, and what made them

    def begin_stint(self, now: float, promoted: bool) -> None:
        """A run stint starts at `now`; `promoted`: the starvation guard lifted the job,
        so the stint's queue counts from the service it has now."""
        self.service = self.service.started(now, self.gpus, promoted)
        self.promoted_at = self.service.promoted_at_gpu_s

    def end_stint(self, now: float) -> None:
        """The running stint ends at `now` (preempted or finished)."""
        self.service = s = self.service.closed(now)
        self.attained, self.executed, self.last_run = s.closed_gpu_s, s.closed_run_s, s.last_run_s
        self.promoted_at = None

    def view(self, now: float) -> JobView:
        """The job's facts at `now`, built once per wait or stint (`facts`: the numbers
        they were built from, and the facts) and, while it runs, moved on to `now`
        (`JobView.running_for`): the simulator re-keys each job at every grid point it
        crosses and at every history refresh."""
        # from the copied fields: a job running on shards (sim/coloc.py) has no stint
        running = self.running
        if running:
            made = (True, self.attained, self.executed, self.promoted_at, self.start)
        else:
            made = (False, self.attained, self.executed, self.last_run, self.waiting_since)
        memo = self.facts
        if memo is None or memo[0] != made:
            memo = self.facts = (made, self._facts())
        return memo[1].running_for(now - self.start) if running else memo[1]

    def _facts(self) -> JobView:
        """The job's facts as it waits, or as its running stint starts."""
        running = self.running
        return JobView(
            job_id=self.id,
            gpus=self.gpus,
            submit_time=self.submit,
            attained_gpu_s=self.attained,
            executed_s=self.executed,
            running=running,
            last_run_s=0.0 if running else self.last_run,
            waiting_since=None if running else self.waiting_since,
            user=self.user,
            partition=self.partition,
            model_tag=self.model,
            true_duration_s=self.duration,
            promoted_at_gpu_s=self.promoted_at if running else None,
            job_name=self.name,
            account=self.account,
            time_limit_s=self.limit,
        )
