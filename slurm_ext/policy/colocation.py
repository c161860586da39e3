"""Co-location decisions (AntMan-style protection, optional EaCO admission). Pure: no I/O.

Jobs sharing a GPU are guaranteed or opportunistic. The agent learns each guaranteed
job's solo utilisation, and its solo progress rate where the job reports one, while no
opportunistic job runs beside it; when the guaranteed job's utilisation or progress rate
falls below `slow_fraction` of its solo level with an opportunistic job active, or the
GPU's memory nears full, the opportunistic jobs on that GPU are paused. They resume when
every guaranteed job on every GPU they share is idle or gone. A busy guaranteed job
with no solo level yet (it started beside a running opportunistic job) gets the
opportunistic jobs paused too: it cannot be judged, so it is protected. Pausing needs a busy
guaranteed job and resuming needs none, so the two never alternate.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from slurm_ext.core.model import GUARANTEED, OPPORTUNISTIC, JobClasses


def classify(qos: str | None, partition: str | None, classes: JobClasses) -> str:
    """QOS decides first, then partition, then the default. A job in several partitions
    (comma list) is opportunistic only if one of them is listed opportunistic."""
    if qos and qos in classes.opportunistic_qos:
        return OPPORTUNISTIC
    if qos and qos in classes.guaranteed_qos:
        return GUARANTEED
    parts = [p for p in (partition or "").split(",") if p]
    if any(p in classes.opportunistic_partitions for p in parts):
        return OPPORTUNISTIC
    if any(p in classes.guaranteed_partitions for p in parts):
        return GUARANTEED
    return classes.default_class


@dataclass(frozen=True)
class JobOnGpu:
    job_id: int
    klass: str
    util: float | None  # the job's share of the GPU, 0..1; None when not measurable
    rate: float | None = None  # the job's own progress (count/s); None when not reported


@dataclass(frozen=True)
class GpuView:
    gpu: str  # uuid
    jobs: tuple[JobOnGpu, ...]
    memory_used_frac: float | None = None
    power_w: float | None = None


@dataclass(frozen=True)
class Policy:
    slow_fraction: float = 0.7  # guaranteed below this share of its solo level = slowed
    memory_high: float = 0.95  # GPU memory fraction that counts as nearly full
    idle_util: float = 0.05  # guaranteed job below this = idle: opportunistic may resume
    min_solo_util: float = 0.10  # solo levels below this are too small to judge slowdown
    min_solo_rate_samples: int = 3  # solo progress samples needed before judging by rate
    solo_alpha: float = 0.3  # EMA weight of a new solo sample
    eaco: EacoModel | None = None  # energy-aware admission, off by default


@dataclass(frozen=True)
class EacoModel:
    """Inputs of the energy-aware admission test that the agent cannot measure itself."""

    gpu_idle_w: float = 70.0
    gpu_max_w: float = 700.0
    opportunistic_power_w: float = 250.0  # predicted busy power of a newcomer alone
    predicted_slowdown: float = 0.05  # fractional runtime increase when co-located
    max_slowdown: float = 0.10


@dataclass(frozen=True)
class Action:
    kind: str  # "pause" or "resume"
    job_id: int
    gpu: str
    reason: str
    code: str = ""  # metric label: memory, slowdown, progress, eaco, idle, gone


@dataclass
class CoState:
    """What the decision remembers between samples (kept in the agent's state file)."""

    solo_util: dict[int, float] = field(default_factory=dict)
    solo_rate: dict[int, float] = field(default_factory=dict)  # progress count/s, EMA
    solo_rate_n: dict[int, int] = field(default_factory=dict)  # solo rate samples seen
    solo_power: dict[int, float] = field(default_factory=dict)
    paused: set[int] = field(default_factory=set)
    admitted: set[int] = field(default_factory=set)  # EaCO verdicts already given
    refused: dict[int, str] = field(default_factory=dict)
    # learnt inputs of EaCO per job, set by the shell from the store's history (kept
    # only in memory: the shell sets them again); a job without one gets the configured
    predictions: dict[int, Prediction] = field(default_factory=dict)
    verdict_source: dict[int, str] = field(default_factory=dict)  # "learnt" / "configured"


@dataclass(frozen=True)
class Prediction:
    """What history says of one job's kind: how much it slows when it shares a GPU
    (fraction of runtime added) and what it draws alone (W). None: no history for that."""

    slowdown: float | None = None
    power_w: float | None = None
    source: str = ""  # where it came from, e.g. "name history, 4 shared runs"


def eaco_admit(
    p_guaranteed_w: float,
    t_guaranteed_s: float,
    t_opportunistic_s: float,
    model: EacoModel,
    slowdown: float | None = None,
    opportunistic_power_w: float | None = None,
) -> tuple[bool, float, str]:
    """Admit co-location when the predicted energy saving exceeds the predicted slowdown
    and the slowdown is within the bound. Returns (admit, saving fraction, reason).
    `slowdown` and `opportunistic_power_w` are learnt predictions; None takes the model's
    configured value.

    Separate: each job on its own GPU, E = Pa*Ta + Pb*Tb. Together: both slowed by s until
    the shorter finishes, drawing idle + both dynamic parts (capped at max power); then the
    longer runs its remainder alone. The saving is mostly one GPU's idle power."""
    s = model.predicted_slowdown if slowdown is None else slowdown
    pb = model.opportunistic_power_w if opportunistic_power_w is None else opportunistic_power_w
    pa, idle = p_guaranteed_w, model.gpu_idle_w
    ta, tb = t_guaranteed_s, t_opportunistic_s
    separate = pa * ta + pb * tb
    together_w = min(model.gpu_max_w, pa + pb - idle)
    shorter, longer = min(ta, tb), max(ta, tb)
    p_longer = pa if ta >= tb else pb
    together = together_w * shorter * (1 + s) + p_longer * (longer - shorter)
    saving = (separate - together) / separate if separate > 0 else 0.0
    if s > model.max_slowdown:
        return False, saving, f"slowdown {s:.3f} above bound {model.max_slowdown:.3f}"
    if saving <= s:
        return False, saving, f"energy saving {saving:.3f} does not outweigh slowdown {s:.3f}"
    return True, saving, f"energy saving {saving:.3f} outweighs slowdown {s:.3f}"


def decide(gpus: Iterable[GpuView], state: CoState, policy: Policy) -> list[Action]:
    """One decision pass; updates `state` (solo levels, paused set) and returns actions."""
    gpus = list(gpus)
    to_pause: dict[int, Action] = {}
    blocked: set[int] = set()  # opportunistic jobs that may not resume this pass
    present: set[int] = set()
    shared = _learn_solo_rates(gpus, state, policy)
    for g in gpus:
        guaranteed = [j for j in g.jobs if j.klass == GUARANTEED]
        opportunistic = [j for j in g.jobs if j.klass == OPPORTUNISTIC]
        present.update(j.job_id for j in g.jobs)
        active_opp = [j for j in opportunistic if j.job_id not in state.paused]
        if not active_opp:
            for j in guaranteed:  # alone on the GPU: learn its solo level
                if j.job_id in shared:
                    continue  # slowed by a neighbour on another of its GPUs: not solo
                if j.util is not None:
                    old = state.solo_util.get(j.job_id)
                    a = policy.solo_alpha
                    state.solo_util[j.job_id] = (
                        j.util if old is None else (1 - a) * old + a * j.util
                    )
                if g.power_w is not None and len(guaranteed) == 1:
                    state.solo_power[j.job_id] = g.power_w
        if not guaranteed or not opportunistic:
            continue
        busy = [j for j in guaranteed if j.util is None or j.util >= policy.idle_util]
        if busy:
            blocked.update(j.job_id for j in opportunistic)
        code, reason = _pressure(g, busy, active_opp, state, policy)
        if reason:
            for j in active_opp:
                to_pause.setdefault(j.job_id, Action("pause", j.job_id, g.gpu, reason, code))
        if policy.eaco is not None:
            _eaco(
                g, guaranteed, active_opp, busy, state, policy.eaco, policy.min_solo_util, to_pause
            )
    actions = list(to_pause.values())
    state.paused.update(to_pause)
    for job in sorted(state.paused - set(to_pause)):
        if job not in present:
            actions.append(Action("resume", job, "", "job left all GPUs", "gone"))
        elif job not in blocked:
            actions.append(Action("resume", job, "", "guaranteed jobs idle or gone", "idle"))
    for a in actions:
        if a.kind == "resume":
            state.paused.discard(a.job_id)
    return actions


def _pressure(
    g: GpuView,
    busy: list[JobOnGpu],
    active_opp: list[JobOnGpu],
    state: CoState,
    policy: Policy,
) -> tuple[str, str]:
    """Why the busy guaranteed jobs on `g` need protecting, or "". An idle guaranteed job
    (below idle_util) is not 'slowed': that keeps pause and resume from alternating."""
    if not active_opp or not busy:
        return "", ""
    if g.memory_used_frac is not None and g.memory_used_frac >= policy.memory_high:
        return "memory", f"GPU memory {g.memory_used_frac:.0%} >= {policy.memory_high:.0%}"
    for j in busy:
        if j.util is not None and j.job_id not in state.solo_util:
            # it started beside a running opportunistic job: no solo level to judge it
            # by, so it is protected first (its solo level is learnt while they pause)
            return "unjudged", f"job {j.job_id} has no solo level yet"
    for j in busy:
        solo = state.solo_util.get(j.job_id)
        if j.util is None or solo is None or solo < policy.min_solo_util:
            continue
        if j.util < policy.slow_fraction * solo:
            return "slowdown", (
                f"job {j.job_id} at {j.util:.2f} utilisation, below "
                f"{policy.slow_fraction:.2f} x solo {solo:.2f}"
            )
    for j in busy:
        solo_rate = state.solo_rate.get(j.job_id)
        n = state.solo_rate_n.get(j.job_id, 0)
        if j.rate is None or solo_rate is None or solo_rate <= 0:
            continue
        if n < policy.min_solo_rate_samples:
            continue
        if j.rate < policy.slow_fraction * solo_rate:
            return "progress", (
                f"job {j.job_id} progress at {j.rate:.4g}/s, below "
                f"{policy.slow_fraction:.2f} x solo {solo_rate:.4g}/s"
            )
    return "", ""


def _learn_solo_rates(gpus: list[GpuView], state: CoState, policy: Policy) -> set[int]:
    """One EMA step per guaranteed job that reports progress and has no active
    opportunistic job on any of its GPUs (its rate is the job's, not a GPU's). Returns
    the jobs that share a GPU with an active opportunistic job: a multi-GPU job slowed on
    one GPU runs slowed on all of them, so none of its GPUs gives a solo level."""
    shared: set[int] = set()
    rates: dict[int, float] = {}
    for g in gpus:
        if any(j.klass == OPPORTUNISTIC and j.job_id not in state.paused for j in g.jobs):
            shared.update(j.job_id for j in g.jobs)
        for j in g.jobs:
            if j.klass == GUARANTEED and j.rate is not None:
                rates.setdefault(j.job_id, j.rate)
    a = policy.solo_alpha
    for job, rate in rates.items():
        if job in shared:
            continue
        old = state.solo_rate.get(job)
        state.solo_rate[job] = rate if old is None else (1 - a) * old + a * rate
        state.solo_rate_n[job] = state.solo_rate_n.get(job, 0) + 1
    return shared


def _eaco(
    g: GpuView,
    guaranteed: list[JobOnGpu],
    active_opp: list[JobOnGpu],
    busy: list[JobOnGpu],
    state: CoState,
    model: EacoModel,
    min_solo: float,
    to_pause: dict[int, Action],
) -> None:
    """Give each newcomer one verdict; a refused one stays paused while guaranteed work runs.

    The verdict rests on a predicted slowdown; once admitted, the slowdown the guaranteed
    jobs really show (1 - utilisation / solo utilisation) is held to `max_slowdown`, and an
    admission it exceeds is withdrawn (on an H100 two compute-bound loops time-sliced left
    the guaranteed one at 0.60 of its solo 0.99: 40 %)."""
    if not busy:
        return
    p_g = max((state.solo_power.get(j.job_id, 0.0) for j in guaranteed), default=0.0)
    p_g = p_g or model.gpu_max_w
    measured = measured_slowdown(busy, state, min_solo)
    for j in active_opp:
        if j.job_id in state.admitted:
            if measured is None or measured <= model.max_slowdown:
                continue
            state.admitted.discard(j.job_id)
            state.refused[j.job_id] = (
                f"measured slowdown {measured:.3f} above bound {model.max_slowdown:.3f}"
            )
        if j.job_id not in state.refused:
            slowdown, power, source = _learnt_inputs(guaranteed, j, state)
            ok, _, why = eaco_admit(p_g, 3600.0, 3600.0, model, slowdown, power)
            state.verdict_source[j.job_id] = "learnt" if source else "configured"
            why += f" (learnt: {source})" if source else " (configured inputs)"
            if ok:
                state.admitted.add(j.job_id)
                continue
            state.refused[j.job_id] = why
        to_pause.setdefault(
            j.job_id, Action("pause", j.job_id, g.gpu, "eaco: " + state.refused[j.job_id], "eaco")
        )


def _learnt_inputs(
    guaranteed: list[JobOnGpu], newcomer: JobOnGpu, state: CoState
) -> tuple[float | None, float | None, str]:
    """Predicted slowdown (the worst learnt one of the guaranteed jobs' kinds) and the
    newcomer's learnt solo power, with a note of where each came from ("" if neither)."""
    slowdown, notes = None, []
    for g in guaranteed:
        p = state.predictions.get(g.job_id)
        if p is not None and p.slowdown is not None:
            if slowdown is None or p.slowdown > slowdown:
                slowdown = p.slowdown
            notes.append(f"slowdown {p.slowdown:.3f} of job {g.job_id}'s {p.source}")
    power = None
    mine = state.predictions.get(newcomer.job_id)
    if mine is not None and mine.power_w is not None:
        power = mine.power_w
        notes.append(f"power {power:.0f} W of {mine.source}")
    return slowdown, power, "; ".join(notes)


def measured_slowdown(busy: list[JobOnGpu], state: CoState, min_solo: float) -> float | None:
    """The worst 1 - util / solo util among the busy guaranteed jobs whose solo level is
    at least `min_solo` (below it the ratio says little)."""
    worst = None
    for j in busy:
        solo = state.solo_util.get(j.job_id)
        if j.util is None or solo is None or solo < min_solo:
            continue
        s = max(0.0, 1.0 - j.util / solo)
        worst = s if worst is None else max(worst, s)
    return worst


def forget(state: CoState, live_jobs: Mapping[int, object] | set[int]) -> None:
    """Drop memory of jobs that have left the node."""
    live = set(live_jobs)
    for d in (
        state.solo_util,
        state.solo_rate,
        state.solo_rate_n,
        state.solo_power,
        state.refused,
        state.predictions,
        state.verdict_source,
    ):
        for job in [j for j in d if j not in live]:
            del d[job]
    state.admitted &= live
