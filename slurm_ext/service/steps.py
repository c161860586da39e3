"""The pure pieces of a service pass: what the policy sees of a job, where pending jobs
should go, which running jobs to requeue, whether a decision changed.

Functions of their arguments only; `slurm_ext.service.loop` calls them in its pass.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace

from slurm_ext.core.hints import parse_hints
from slurm_ext.core.model import Cluster, Decision, Job, JobState, JobView, Node
from slurm_ext.policy import (
    PolicyConfig,
    RunningJob,
    WaitingJob,
    asks_fewest_nodes,
    choose_victims,
    consolidate_for,
    could_start,
    fits_now,
    network_sensitive,
    place,
    requeue_cost_gpu_s,
    why_no_victims,
)
from slurm_ext.store.rows import DecisionRecord, JobRecord


def same_decision(
    old: DecisionRecord,
    d: Decision,
    value: int | None,
    mode: str,
    placement: tuple[str, ...] | None,
    slurm_reason: str | None,
) -> bool:
    """Is the stored decision what this pass decided, but for its rank (its position in
    the whole order) and when it was made?"""
    return (
        old.queue == d.queue
        and old.gittins == d.index
        and old.promoted == d.promoted
        and old.reason == d.reason
        and old.value == value
        and old.mode == mode
        and old.placement == placement
        and old.group == d.group
        and old.group_samples == d.group_samples
        and old.slurm_reason == slurm_reason
    )


def with_kinds(
    completions: Sequence[tuple[int, float, float, float]],
    jobs: Sequence[Job],
    records: dict[int, JobRecord],
) -> list[tuple]:
    """Completions with each job's kind (user, name, account, time limit) and GPU count
    from the snapshot, or from its record when it is gone from Slurm (no account or limit
    then). The GPU count is stored because GPU-s / run s gives none for a 0 s run."""
    by_id = {j.job_id: j for j in jobs}
    out: list[tuple] = []
    for c in completions:
        job = by_id.get(c[0])
        rec = records.get(c[0])
        gpus = (job.gpus if job is not None else 0) or (rec.gpus if rec is not None else 0)
        if job is not None:
            out.append((*c, job.user, job.name, job.account, job.time_limit_s, gpus or None))
        elif rec is not None:
            out.append((*c, rec.user, rec.name, "", None, gpus or None))
        else:
            out.append(tuple(c))
    return out


def job_view(job: Job, rec: JobRecord, now: float) -> JobView:
    """What the policy sees of a job: its attained service from its record; the current
    stint for a running job, the last one for a waiting job."""
    # a requeued job still completing its old step waits already (records.fold), as the
    # simulator has it
    running = job.running and rec.run_start is not None
    if rec.run_start is None:  # not running: nothing grows with time (most jobs)
        attained, executed, last_run = rec.closed_gpu_s, rec.closed_run_s, rec.last_run_s
    else:
        service = rec.attained
        attained, executed = service.gpu_s(now), rec.executed_s(now)
        last_run = service.last_run_s_at(now)
    return JobView(
        job_id=job.job_id,
        gpus=max(1, job.gpus),
        submit_time=rec.submit_time or job.submit_time,  # Slurm moves it on a requeue
        attained_gpu_s=attained,
        executed_s=executed,
        running=running,
        last_run_s=last_run,
        waiting_since=rec.waiting_since,
        user=job.user,
        partition=job.partition,
        model_tag=rec.model_tag,
        promoted_at_gpu_s=rec.promoted_at_gpu_s if running else None,
        job_name=job.name,
        account=job.account,
        time_limit_s=job.time_limit_s,
    )


def waiting_inputs(job: Job, rec: JobRecord) -> tuple:
    """Everything `job_view` reads of a job that is not running, whose view then does
    not change with time: while these are equal the service reuses the last pass's view
    (most of a queue waits, and building 50,000 views is a fifth of a steady pass)."""
    return (
        job.job_id,
        job.state,
        job.gpus,
        job.submit_time,
        job.user,
        job.partition,
        job.name,
        job.account,
        job.time_limit_s,
        rec.submit_time,
        rec.run_start,
        rec.closed_gpu_s,
        rec.closed_run_s,
        rec.last_run_s,
        rec.waiting_since,
        rec.model_tag,
    )


@dataclass(frozen=True)
class PreemptionPlan:
    """Whom the service requeues this pass, for whom, and why nobody when nobody."""

    top: int | None  # the best-ranked waiting job that could start (None: none)
    victims: list[int] = field(default_factory=list)  # worst first
    note: str = ""  # why no job is requeued for `top` although it does not fit ("": n/a)


def preemption_victims(
    decisions: Sequence[Decision],
    by_id: dict[int, Job],
    nodes: Sequence[Node],
    pins: Collection[int],
    now: float,
    policy: PolicyConfig,
    placement_mode: str,
) -> tuple[int | None, list[int]]:
    """(`plan_preemption`'s top, its victims) on a cluster not described (any node)."""
    plan = plan_preemption(decisions, by_id, nodes, pins, now, policy, placement_mode)
    return plan.top, plan.victims


def plan_preemption(
    decisions: Sequence[Decision],
    by_id: dict[int, Job],
    nodes: Sequence[Node],
    pins: Collection[int],
    now: float,
    policy: PolicyConfig,
    placement_mode: str,
    cluster: Cluster | None = None,
    ours: Collection[int] = (),
) -> PreemptionPlan:
    """The best waiting job that could start and the running jobs to requeue for it.

    The waiting job: the best-ranked pending one whose Slurm reason says it would start
    if GPUs were free (`policy.reasons.could_start`; not held, not in BeginTime after a
    requeue, not waiting on a dependency or a limit). Its nodes: those `cluster`
    describes for its partitions, GPU type and node lists (`usable_nodes`; ours: the
    jobs whose node lists are the service's own placement hints); any node without a
    cluster. Eligible victims: Slurm may requeue it (--requeue) and it opted in
    (`checkpoint=1`), not pinned, past min_run_s. A running job's GPUs per node: its
    per-node request, else its GPUs spread evenly over its nodes (Slurm's JSON carries
    no per-node split).
    """
    waiting = [d for d in decisions if _may_start(by_id[d.job_id])]
    if not waiting:
        return PreemptionPlan(None)
    top, top_rank = by_id[waiting[0].job_id], waiting[0].rank
    free = {n.name: n.gpus_free for n in nodes if n.schedulable}
    below = _running_below(decisions, by_id, top_rank, free, pins, now, policy)
    allowed = usable_nodes(top, cluster, top.job_id in ours)
    model = parse_hints(top.comment).model
    gain = None
    if policy.preemption_cost:  # the wait it has paid so far (rent or buy)
        gain = top.gpus * max(0.0, now - top.submit_time)
    capacity = max((n.gpus for n in nodes if allowed is None or n.name in allowed), default=0)
    # a per-node request starts only on its nodes whatever the mode: victims spread over
    # the cluster would free GPUs it cannot use (live replays: the same job requeued
    # one victim after another while backfill refilled each freed GPU)
    bound = asks_fewest_nodes(top.gpus, top.gpus_per_node, top.num_nodes, capacity)
    want = WaitingJob(
        top.job_id,
        top.gpus,
        consolidate_for(placement_mode, network_sensitive(model), bound),
        gain_gpu_s=gain,
        nodes=allowed,
    )
    victims = choose_victims(
        want, below, free, capacity, policy.min_run_s, max_preemptions=policy.max_preemptions
    )
    note = ""
    if not victims and not fits_now(want, free, capacity):
        note = why_no_victims(want, below, policy.min_run_s, policy.max_preemptions)
    return PreemptionPlan(top.job_id, victims, note)


def _running_below(
    decisions: Sequence[Decision],
    by_id: dict[int, Job],
    top_rank: int,
    free: dict[str, int],
    pins: Collection[int],
    now: float,
    policy: PolicyConfig,
) -> list[RunningJob]:
    """The running jobs ranked below `top_rank`, worst first, as the rule sees them."""
    below = []
    for d in reversed(decisions):
        job = by_id[d.job_id]
        if d.rank <= top_rank or job.state != JobState.RUNNING:  # not one leaving already
            continue
        ran = now - (job.start_time if job.start_time is not None else now)
        lost = 0.0
        if policy.preemption_cost:  # its stint restarted from a checkpoint: count from there
            lost = requeue_cost_gpu_s(
                job.gpus, ran, policy.preemption_checkpoint_s, policy.preemption_restart_s
            )
        below.append(
            RunningJob(
                job.job_id,
                tuple((n, g) for n, g in _per_node(job) if n in free),
                job.requeue and parse_hints(job.comment).checkpoint,
                ran,
                job.job_id in pins,
                lost_gpu_s=lost,
                preemptions=job.restart_count or 0,
            )
        )
    return below


def usable_nodes(
    job: Job, cluster: Cluster | None, own_lists: bool = False
) -> frozenset[str] | None:
    """The nodes `job` may run on (`Cluster.eligible_nodes`: its partitions, `-p a,b`
    naming several, its GPU type, at least its per-node GPUs, not its excluded nodes,
    within its required ones); None (any node) without a cluster description or when
    the cluster knows none of its partitions (a description older than the partition).
    own_lists: its node lists are the service's placement hint, not its owner's: ignored.
    """
    if cluster is None:
        return None
    parts = tuple(p for p in job.partition.split(",") if p)
    if not any(cluster.partition(p) is not None for p in parts):
        return None
    excluded = () if own_lists else job.excluded_nodes
    found = cluster.eligible_nodes(parts, job.gpu_type, (), excluded, job.gpus_per_node)
    names = frozenset(n.name for n in found)
    if job.required_nodes and not own_lists:
        names &= frozenset(job.required_nodes)
    return names


def _may_start(job: Job) -> bool:
    """A waiting job that would start if GPUs were free: not held, not in BeginTime
    (Slurm holds a requeued job so; the simulator keeps it out of the queue until then),
    not waiting on a dependency or a limit."""
    return job.pending and not job.held and could_start(job.reason)


def _per_node(job: Job) -> list[tuple[str, int]]:
    if not job.nodes:
        return []
    if job.gpus_per_node:
        return [(n, job.gpus_per_node) for n in job.nodes]
    share, extra = divmod(job.gpus, len(job.nodes))
    return [(n, share + (1 if i < extra else 0)) for i, n in enumerate(job.nodes)]


def plan_placements(
    ranked_pending: Sequence[Job],
    nodes: Sequence[Node],
    mode: str,
    cluster: Cluster | None = None,
) -> dict[int, tuple[str, ...] | None]:
    """Node sets for pending jobs that can start now, in rank order; None: no hint.

    Only per-job GPU requests (--gpus=N) and single-node jobs get hints: rewriting the
    node count of a per-node request would change how many GPUs it gets. With a
    `cluster` description a job's hint stays on the nodes of its partitions and GPU
    type (`usable_nodes`; the jobs given here have no node lists of their owner's).
    """
    free = {n.name: n for n in nodes if n.schedulable}
    out: dict[int, tuple[str, ...] | None] = {}
    for job in ranked_pending:
        if job.gpus <= 0:
            continue
        allowed = usable_nodes(job, cluster, own_lists=True)
        cands = place(
            job.job_id,
            job.gpus,
            [n for n in free.values() if allowed is None or n.name in allowed],
            mode=mode,
            model_tag=parse_hints(job.comment).model,
        )
        hintable = job.gpus > 1 and (job.gpus_per_node == 0 or job.num_nodes == 1)
        if not cands:
            out[job.job_id] = None
            continue
        best = cands[0]
        out[job.job_id] = best.nodes if hintable else None
        need = job.gpus
        for name in best.nodes:  # take the GPUs so later jobs see what is left
            n = free[name]
            take = min(n.gpus_free, need)
            free[name] = replace(n, gpus_alloc=n.gpus_alloc + take)
            need -= take
    return out


def order_inversions(
    decisions: Sequence[Decision], by_id: dict[int, Job], written: Collection[int]
) -> tuple[int, int]:
    """(inverted, compared): adjacent pending jobs of the service's order that Slurm's
    priority puts the other way round. Only jobs whose value this pass did not change are
    compared (Slurm's priority, read at the pass's start, already holds their value), and
    only those whose priority Slurm reported (> 0). A share well above 0 says Slurm's own
    factors (age, fair-share, QOS) outweigh the spacing of the written values: in
    site-factor mode the band [value_min, value_max] is too narrow for the weights."""
    prios = [
        j.priority
        for d in decisions
        if (j := by_id[d.job_id]).pending and j.priority > 0 and d.job_id not in written
    ]
    inverted = sum(1 for a, b in zip(prios, prios[1:]) if a < b)
    return inverted, max(0, len(prios) - 1)
