"""Policy knobs: a plain dataclass. The shells fill it from one TOML table (`[policy]`)
with `slurm_ext.core.config.from_dict`; the policy itself reads no file."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from slurm_ext.core.fields import choices, positive
from slurm_ext.policy.kinds import parse_level

POLICIES = ("gittins", "las", "fifo", "multifactor", "fairshare", "sjf", "srtf")
ORACLES = ("sjf", "srtf")  # these read JobView.true_duration_s: simulator-only baselines


@dataclass
class PolicyConfig:
    """How jobs are ranked.

    policy: gittins (Tiresias discretised 2D-Gittins), las (discretised 2D-LAS, FIFO inside
        a queue), fifo, multifactor (Slurm-like age + size), sjf / srtf (oracles).
    queue_thresholds_gpu_s: multi-level queue limits in attained GPU-seconds; a job with
        attained service >= thresholds[i] sits in queue i+1 or lower. Empty = one queue.
    queue_gpu_exponent: how a job's width stretches the queue limits: a job with G GPUs
        leaves queue i after thresholds[i] x G**e GPU-seconds. 0 is Tiresias' 2D rule
        (GPU-seconds, so an 8-GPU job crosses each limit 8x sooner in wall time), 1 (the
        default) is run time: the limits read as seconds a job has run, whatever its
        width, and the width enters through the per-width Gittins index instead
        (gittins_classes = "gpus"). See docs/benchmarks.md for the measurements.
    starvation_factor: Tiresias STARVELIMIT. A pending job that has run before is promoted
        to queue 0 once it has waited longer than this x its last run stint. 0 disables.
    starvation_scope: which requeued jobs the starvation guard covers: "backstop" (default)
        only those the wait guard cannot judge (wait guard off, no history, or the job's
        index is 0: it outlived every completion its table holds); "all" (Tiresias) every
        one, on top of the wait guard. Under a sustained backlog "all" lifts long jobs
        preempted after short stints and (with wait_guard_keep) keeps their stints ahead
        of everyone: the order turns FIFO (docs/benchmarks.md, session 6).
    history_window: completed jobs (GPU-seconds) kept for the Gittins distribution.
    min_run_s: a running job whose current stint is shorter than this is not preempted
        (stops promotion / preemption ping-pong that only burns restart overhead).
    gittins_grid_start_gpu_s / gittins_grid_per_decade: the Gittins index is tabulated on
        a geometric grid of attained service and read as a step function, so a job's
        index only changes when it crosses a grid point (cheap to cache, stable order).
    gittins_classes: "gpus" (one GPU-time distribution per GPU-count class: 1, 2, 3-4,
        5-8, 9-16, ...; a job reads its class's index, or the pooled one while its class
        has fewer than gittins_class_min_samples completions in the history window) or
        "pooled" (one distribution for all jobs, as Tiresias). A wide job's GPU-time is
        larger in distribution, which only per-width tables can see.
    gittins_censored: estimate the GPU-time distribution by Kaplan-Meier from the completed
        jobs in the window plus the attained service of the active jobs (running or
        pending) as right-censored observations (S > attained), instead of from the
        completed jobs alone, which under overload under-represent the long jobs still
        queued.
    gittins_kinds: groups of similar jobs whose GPU-times a job's index reads before its
        GPU class and the pooled history, finest first; each is fields joined by "+"
        from user, name (job name), account, gpus (GPU-count class). A job reads the
        first group it belongs to with at least gittins_kind_min_samples completions in
        the history window (policy/kinds.py). Empty: GPU class and pooled only.
    gittins_kind_choice: which of its groups a job reads: "finest" (default: the first
        of gittins_kinds with enough samples, then its GPU class, then pooled) or
        "tightest" (opt-in: of those, its class and the pooled history, the one whose
        GPU-times are least spread; a group no tighter than the pooled history tells
        nothing and the job reads the pooled table, ranked like an average job in submit
        order; policy/kinds.py, measured in docs/benchmarks.md Session 9).
    gittins_time_limit: truncate the distribution a job's index reads at its time limit
        x GPUs (Slurm ends it there), while its attained service is below that.
    gittins_index: "quantum" is Tiresias' index (best over quanta D: it rewards a chance
        of finishing early, which only preemption can use); "whole" is the index of a job
        that runs to its end once started, 1 / E[remaining GPU-time | attained] (Smith's
        rule; completed jobs only, no censoring), the right order without preemption;
        "auto" (default) is "whole" where nothing is preempted (the service's
        preemption = "off", the simulator's --no-preemptive), else "quantum": the shells
        resolve it with `for_preemption`.
    gittins_whole_order: what the whole-job index orders by: "gpu_time" (default,
        Smith's rule on the expected remaining GPU-time) or "run_time" (that over the
        job's GPUs, so wide jobs are not ranked behind every narrow one; opt-in: it
        helps the recurring-user traces at load 1.0-1.1 and loses a little on others,
        docs/benchmarks.md Session 6). Ignored with the quantum index (preemption).
    wait_guard_factor: the starvation rule for jobs the index ranks low (wide, long): a
        pending job (gittins) that has waited longer than this x its predicted run time
        (1 / its Gittins index, GPU-seconds over its GPUs; for the whole-job index the
        expected remaining run) goes ahead of every job not so guarded, in submit order,
        so Slurm's backfill reserves room for it (wait_guard = "promote"), or its index
        doubles each time its wait passes 1, 3, 7, ... x (factor x predicted run)
        (wait_guard = "age": aging in the job's own predicted service, as the response
        ratio of HRRN, in steps so keys change at events). 0 disables.
    wait_guard_keep: a job whose stint the wait guard ("promote") or the starvation guard
        started keeps the guard's rank (ahead of every unguarded job, so it is no
        preemption victim for them) until that stint has run this x its predicted run at
        the start (1 / index, the guard's unit). Without it the job ranks by its index
        alone once it starts and the next guarded job requeues it after min_run_s (the
        requeue thrash, docs/benchmarks.md). 0: off; default 10 (= the guard factor).
    wait_guard_budget: bounds what the wait guard ("promote") lifts at once, a rule
        across jobs (`guards.budget_lifts`): the jobs it is due for are lifted in the
        order they became due (deadline: waiting since + factor x predicted run) while
        their GPUs fit this share of the cluster's (the first always); the rest keep
        their index's rank until earlier lifted jobs start. Without it the guard lifts a
        whole recurring kind, or most of a backlog, at once and the order turns first
        come first served (docs/benchmarks.md, Session 7). 0 (default): no bound.
    wait_guard_budget_scope: whose GPUs the budget bounds: "cluster" (default: all lifted
        jobs together) or "user" (each user's lifted jobs, the share for each user: one
        user's recurring kind is not lifted wholesale, other users' due jobs still are).
    max_preemptions: a running job preempted this many times already is not preempted
        again (0: no cap); bounds the requeues of one job on long, backlogged runs.
    preemption_cost: weigh a requeue's cost against the waiting job's gain
        (`policy.preemption`): a job whose lost work since its last checkpoint plus
        restart overhead (GPU-seconds) exceeds the waiting job's wait so far x its GPUs
        is not preempted.
    preemption_checkpoint_s / preemption_restart_s: what the service assumes of opted-in
        jobs for that cost (checkpoint interval, 0: no work lost; restart overhead); the
        simulator uses its cluster's own (SimConfig).
    multifactor_age_weight / multifactor_size_weight: priority = age_weight x age in
        hours + size_weight x GPUs (Slurm's PriorityWeightAge / JobSize, uncapped age).
    fairshare_*: policy "fairshare" is Slurm alone as sites run it (policy/fairshare.py):
        priority = weight_age x min(age / max_age, 1) + weight x classic fair-share
        factor of the job's user (usage decayed with half_life, factors recomputed
        every calc_period). Defaults: Slurm's documented example weights (Age 1000,
        Fairshare 10000) and its default PriorityMaxAge / PriorityDecayHalfLife (7
        days) and PriorityCalcPeriod (5 min). Needs the user's factor from the shell
        (the simulator's UsageLedger); without one every user reads 1.
    fairshare_site_weight: for gittins, compose the index with Slurm's own priority
        as a site would: key = Slurm's multifactor priority (the fairshare_* weights,
        the user's factor from the shell's ledger) + this x the index mapped to [0, 1]
        (`fairshare.index_site_factor`), the SiteFactor term. 0: off (the index alone).
        W is how many priority points the ranking may move a job (policy/compose.py).
    fairshare_guard: what the wait guard does under it: "site" (default) gives a
        guarded job the top SiteFactor (W x 1), which fair-share can still outweigh,
        as in Slurm; "promote" lifts it above every other job (fair-share bypassed;
        how the composition was modelled before).
    """

    policy: str = choices(*POLICIES, default="gittins")
    queue_thresholds_gpu_s: list[float] = field(
        default_factory=lambda: [3600.0, 14400.0, 57600.0, 230400.0]
    )
    queue_gpu_exponent: float = 1.0
    starvation_factor: float = 160.0
    starvation_scope: str = choices("backstop", "all", default="backstop")
    history_window: int = positive(5000)
    min_run_s: float = 1200.0
    gittins_grid_start_gpu_s: float = positive(60.0)
    gittins_grid_per_decade: int = positive(4)
    gittins_classes: str = choices("pooled", "gpus", default="gpus")
    gittins_class_min_samples: int = positive(200)
    gittins_censored: bool = False
    gittins_kinds: list[str] = field(default_factory=lambda: ["user+name", "user+gpus", "user"])
    gittins_kind_min_samples: int = positive(5)
    gittins_kind_choice: str = choices("finest", "tightest", default="finest")
    gittins_time_limit: bool = True
    gittins_index: str = choices("auto", "quantum", "whole", default="auto")
    gittins_whole_order: str = choices("gpu_time", "run_time", default="gpu_time")
    wait_guard_factor: float = 10.0
    wait_guard: str = choices("promote", "age", default="promote")
    wait_guard_keep: float = 10.0
    wait_guard_budget: float = 0.0
    wait_guard_budget_scope: str = choices("cluster", "user", default="cluster")
    max_preemptions: int = 50
    preemption_cost: bool = True
    preemption_checkpoint_s: float = 900.0
    preemption_restart_s: float = 30.0
    multifactor_age_weight: float = 10.0
    multifactor_size_weight: float = 10.0
    fairshare_weight_age: float = 1000.0
    fairshare_weight: float = 10000.0
    fairshare_max_age_s: float = 7 * 86400.0
    fairshare_half_life_s: float = 7 * 86400.0
    fairshare_calc_period_s: float = positive(300.0)
    fairshare_site_weight: float = 0.0
    fairshare_guard: str = choices("site", "promote", default="site")

    def __post_init__(self) -> None:
        ts = list(self.queue_thresholds_gpu_s)
        if any(t <= 0 for t in ts) or ts != sorted(ts):
            raise ValueError("queue_thresholds_gpu_s must be positive and increasing")
        if not 0.0 <= self.queue_gpu_exponent <= 1.0:
            raise ValueError("queue_gpu_exponent must be between 0 and 1")
        if self.starvation_factor < 0:
            raise ValueError("starvation_factor must be >= 0")
        if self.history_window < 1:
            raise ValueError("history_window must be >= 1")
        if self.min_run_s < 0:
            raise ValueError("min_run_s must be >= 0")
        if self.gittins_grid_start_gpu_s <= 0 or self.gittins_grid_per_decade < 1:
            raise ValueError("gittins grid must start > 0 with >= 1 point per decade")
        if self.wait_guard_factor < 0:
            raise ValueError("wait_guard_factor must be >= 0 (0: off)")
        if not self.wait_guard_keep >= 0:  # NaN too
            raise ValueError(f"wait_guard_keep must be >= 0 (0: off), got {self.wait_guard_keep}")
        if not 0.0 <= self.wait_guard_budget <= 1.0:  # NaN too
            raise ValueError(
                "wait_guard_budget must be a share of the GPUs in [0, 1] (0: no bound), "
                f"got {self.wait_guard_budget}"
            )
        for name in ("preemption_checkpoint_s", "preemption_restart_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a number of seconds >= 0, got {v}")
        if self.fairshare_calc_period_s <= 0:
            raise ValueError("fairshare_calc_period_s must be > 0")
        for name in (
            "fairshare_weight_age",
            "fairshare_weight",
            "fairshare_max_age_s",
            "fairshare_half_life_s",
            "fairshare_site_weight",
        ):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a number >= 0, got {v}")
        if self.max_preemptions < 0:
            raise ValueError("max_preemptions must be >= 0 (0: no cap)")
        if self.gittins_class_min_samples < 1:
            raise ValueError("gittins_class_min_samples must be >= 1")
        if self.gittins_kind_min_samples < 1:
            raise ValueError("gittins_kind_min_samples must be >= 1")
        for spec in self.gittins_kinds:
            parse_level(spec)

    def for_preemption(self, preemptive: bool) -> PolicyConfig:
        """This config with gittins_index "auto" resolved for a deployment that does
        (or does not) preempt; the policy reads "auto" as "quantum"."""
        if self.gittins_index != "auto":
            return self
        return replace(self, gittins_index="quantum" if preemptive else "whole")

    @property
    def oracle(self) -> bool:
        return self.policy in ORACLES

    @property
    def reads_fairshare(self) -> bool:
        """Whether keys read the users' fair-share factors (the shell keeps the ledger)."""
        return self.policy == "fairshare" or (
            self.policy == "gittins" and self.fairshare_site_weight > 0
        )
