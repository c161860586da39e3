"""Policy knobs: a plain dataclass. The shells fill it from one TOML table (`[policy]`,
its tuning constants in `[policy.tuning]`) with `slurm_ext.core.config`; the policy
itself reads no file."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from slurm_ext.core.fields import SIMULATOR, TUNING, choices, positive, simulator_only, tuning
from slurm_ext.policy.kinds import parse_level

POLICIES = ("gittins", "las", "fifo", "multifactor", "fairshare", "sjf", "srtf")
ORACLES = ("sjf", "srtf")  # these read JobView.true_duration_s: simulator-only baselines


@dataclass
class PolicyConfig:
    """How jobs are ranked. `[policy]` in service.toml holds what an admin sets; the
    tuning constants (`[policy.tuning]`) are the values benchmarks chose
    (docs/simulator.md, "Tuning constants"); the simulator-only keys model Slurm's own
    priority for `slurm-ext simulate` (`slurm_ext.core.fields` says where each is set).

    Set by an admin:
    policy: gittins (Tiresias discretised 2D-Gittins), las (discretised 2D-LAS, FIFO inside
        a queue), fifo, multifactor (Slurm-like age + size), fairshare (Slurm alone with
        its fair-share factor: the simulator's baseline), sjf / srtf (oracles).
    min_run_s: a running job whose current stint is shorter than this is not preempted
        (stops promotion / preemption ping-pong that only burns restart overhead).
    max_preemptions: a running job preempted this many times already is not preempted
        again (0: no cap); bounds the requeues of one job on long, backlogged runs.
    fairshare_site_weight: for gittins, compose the index with Slurm's own priority
        as a site would: key = Slurm's multifactor priority (the fairshare_* weights,
        the user's factor from the shell's ledger) + this x the index mapped to [0, 1]
        (`fairshare.index_site_factor`), the SiteFactor term. 0: off (the index alone).
        W is how many priority points the ranking may move a job (policy/compose.py);
        a wait-guarded job gets the top SiteFactor, W x 1, which fair-share can still
        outweigh, as in Slurm.

    Tuning constants:
    queue_thresholds_gpu_s: multi-level queue limits in attained GPU-seconds; a job with
        attained service >= thresholds[i] sits in queue i+1 or lower. Empty = one queue.
    queue_gpu_exponent: how a job's width stretches the queue limits: a job with G GPUs
        leaves queue i after thresholds[i] x G**e GPU-seconds. 0 is Tiresias' 2D rule
        (GPU-seconds, so an 8-GPU job crosses each limit 8x sooner in wall time), 1 (the
        default) is run time: the limits read as seconds a job has run, whatever its
        width, and the width enters through the per-width Gittins index instead
        (gittins_classes = "gpus").
    starvation_factor: Tiresias STARVELIMIT. A pending job that has run before is promoted
        to queue 0 once it has waited longer than this x its last run stint, if the wait
        guard cannot judge it (wait guard off, no history, or the job's index is 0: it
        outlived every completion its table holds); two guards on one requeued job
        turned the order first come, first served under a sustained backlog. 0 disables.
    history_window: completed jobs (GPU-seconds) kept for the Gittins distribution.
    gittins_grid_start_gpu_s / gittins_grid_per_decade: the Gittins index is tabulated on
        a geometric grid of attained service and read as a step function, so a job's
        index only changes when it crosses a grid point (cheap to cache, stable order).
    gittins_classes: "gpus" (one GPU-time distribution per GPU-count class: 1, 2, 3-4,
        5-8, 9-16, ...; a job reads its class's index, or the pooled one while its class
        has fewer than gittins_class_min_samples completions in the history window) or
        "pooled" (one distribution for all jobs, as Tiresias). A wide job's GPU-time is
        larger in distribution, which only per-width tables can see.
    gittins_kinds: groups of similar jobs whose GPU-times a job's index reads before its
        GPU class and the pooled history, finest first; each is fields joined by "+"
        from user, name (job name), account, gpus (GPU-count class). A job reads the
        first group it belongs to with at least gittins_kind_min_samples completions in
        the history window (policy/kinds.py). Empty: GPU class and pooled only.
    gittins_time_limit: truncate the distribution a job's index reads at its time limit
        x GPUs (Slurm ends it there), while its attained service is below that.
    wait_guard_factor: the starvation rule for jobs the index ranks low (wide, long): a
        pending job (gittins) that has waited longer than this x its predicted run time
        (1 / its Gittins index, GPU-seconds over its GPUs; for the whole-job index the
        expected remaining run) goes ahead of every job not so guarded, in submit order,
        so Slurm's backfill reserves room for it. 0 disables.
    wait_guard_keep: a job whose stint the wait guard or the starvation guard started
        keeps the guard's rank (ahead of every unguarded job, so it is no preemption
        victim for them) until that stint has run this x its predicted run at the start
        (1 / index, the guard's unit). Without it the job ranks by its index alone once
        it starts and the next guarded job requeues it after min_run_s (the requeue
        thrash). 0: off.
    preemption_cost: weigh a requeue's cost against the waiting job's gain
        (`policy.preemption`): a job whose lost work since its last checkpoint plus
        restart overhead (GPU-seconds) exceeds the waiting job's wait so far x its GPUs
        is not preempted.
    preemption_checkpoint_s / preemption_restart_s: what the service assumes of opted-in
        jobs for that cost (checkpoint interval, 0: no work lost; restart overhead); the
        simulator uses its cluster's own (SimConfig).
    multifactor_age_weight / multifactor_size_weight: priority = age_weight x age in
        hours + size_weight x GPUs (Slurm's PriorityWeightAge / JobSize, uncapped age).

    Simulator-only (Slurm's own priority, which a live site's slurm.conf holds):
    fairshare_*: policy "fairshare" is Slurm alone as sites run it (policy/fairshare.py),
        and gittins with fairshare_site_weight adds the SiteFactor to it:
        priority = weight_age x min(age / max_age, 1) + weight x classic fair-share
        factor of the job's user (usage decayed with half_life, factors recomputed
        every calc_period). Defaults: Slurm's documented example weights (Age 1000,
        Fairshare 10000) and its default PriorityMaxAge / PriorityDecayHalfLife (7
        days) and PriorityCalcPeriod (5 min). Needs the user's factor from the shell
        (the simulator's UsageLedger); without one every user reads 1.

    Set by the shells, not by a file:
    gittins_index: "auto" (what a config holds) is resolved by `for_preemption`: "whole",
        the index of a job that runs to its end once started, 1 / E[remaining GPU-time |
        attained] (Smith's rule), where nothing is preempted (the service's preemption =
        "off", the simulator's --no-preemptive); else "quantum", Tiresias' index (best
        over quanta D: it rewards a chance of finishing early, which only preemption can
        use). The policy reads "auto" as "quantum".
    """

    policy: str = choices(*POLICIES, default="gittins")
    queue_thresholds_gpu_s: list[float] = tuning(
        default_factory=lambda: [3600.0, 14400.0, 57600.0, 230400.0]
    )
    queue_gpu_exponent: float = tuning(1.0)
    starvation_factor: float = tuning(160.0)
    history_window: int = positive(5000, place=TUNING)
    min_run_s: float = 1200.0
    gittins_grid_start_gpu_s: float = positive(60.0, place=TUNING)
    gittins_grid_per_decade: int = positive(4, place=TUNING)
    gittins_classes: str = choices("pooled", "gpus", default="gpus", place=TUNING)
    gittins_class_min_samples: int = positive(200, place=TUNING)
    gittins_kinds: list[str] = tuning(default_factory=lambda: ["user+name", "user+gpus", "user"])
    gittins_kind_min_samples: int = positive(5, place=TUNING)
    gittins_time_limit: bool = tuning(True)
    gittins_index: str = choices("auto", "quantum", "whole", default="auto")
    wait_guard_factor: float = tuning(10.0)
    wait_guard_keep: float = tuning(10.0)
    max_preemptions: int = 50
    preemption_cost: bool = tuning(True)
    preemption_checkpoint_s: float = tuning(900.0)
    preemption_restart_s: float = tuning(30.0)
    multifactor_age_weight: float = tuning(10.0)
    multifactor_size_weight: float = tuning(10.0)
    fairshare_weight_age: float = simulator_only(1000.0)
    fairshare_weight: float = simulator_only(10000.0)
    fairshare_max_age_s: float = simulator_only(7 * 86400.0)
    fairshare_half_life_s: float = simulator_only(7 * 86400.0)
    fairshare_calc_period_s: float = positive(300.0, place=SIMULATOR)
    fairshare_site_weight: float = 0.0

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
