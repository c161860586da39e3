"""The pure pieces of a service pass: what the policy sees of a job, where pending jobs
should go, which running jobs to requeue, whether a decision changed.

Functions of their arguments only; `slurm_ext.service.loop` calls them in its pass.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace

from slurm_ext.core.hints import parse_hints
from slurm_ext.core.model import Decision, Job, JobState, JobView, Node
from slurm_ext.policy import (
    PolicyConfig,
    RunningJob,
    WaitingJob,
    asks_fewest_nodes,
    choose_victims,
    consolidate_for,
    network_sensitive,
    place,
    requeue_cost_gpu_s,
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


def preemption_victims(
    decisions: Sequence[Decision],
    by_id: dict[int, Job],
    nodes: Sequence[Node],
    pins: Collection[int],
    now: float,
    policy: PolicyConfig,
    placement_mode: str,
) -> tuple[int | None, list[int]]:
    """The best waiting job and the running jobs to requeue for it, worst first.

    Eligible: Slurm may requeue it (--requeue) and it opted in (`checkpoint=1`), not
    pinned, past min_run_s. A running job's GPUs per node: its per-node request, else its
    GPUs spread evenly over its nodes (Slurm's JSON carries no per-node split).
    """
    # not a job Slurm holds after its requeue (reason BeginTime): it cannot start yet, and
    # the simulator keeps it out of the queue until then
    waiting = [d for d in decisions if _may_start(by_id[d.job_id])]
    if not waiting:
        return None, []
    top, top_rank = by_id[waiting[0].job_id], waiting[0].rank
    free = {n.name: n.gpus_free for n in nodes if n.schedulable}
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
    model = parse_hints(top.comment).model
    gain = None
    if policy.preemption_cost:  # the wait it has paid so far (rent or buy)
        gain = top.gpus * max(0.0, now - top.submit_time)
    capacity = max((n.gpus for n in nodes), default=0)
    # a per-node request starts only on its nodes whatever the mode: victims spread over
    # the cluster would free GPUs it cannot use (live replays: the same job requeued
    # one victim after another while backfill refilled each freed GPU)
    bound = asks_fewest_nodes(top.gpus, top.gpus_per_node, top.num_nodes, capacity)
    want = WaitingJob(
        top.job_id,
        top.gpus,
        consolidate_for(placement_mode, network_sensitive(model), bound),
        gain_gpu_s=gain,
    )
    return top.job_id, choose_victims(
        want, below, free, capacity, policy.min_run_s, max_preemptions=policy.max_preemptions
    )


def _may_start(job: Job) -> bool:
    return job.pending and not job.held and job.reason != "BeginTime"


def _per_node(job: Job) -> list[tuple[str, int]]:
    if not job.nodes:
        return []
    if job.gpus_per_node:
        return [(n, job.gpus_per_node) for n in job.nodes]
    share, extra = divmod(job.gpus, len(job.nodes))
    return [(n, share + (1 if i < extra else 0)) for i, n in enumerate(job.nodes)]


def plan_placements(
    ranked_pending: Sequence[Job], nodes: Sequence[Node], mode: str
) -> dict[int, tuple[str, ...] | None]:
    """Node sets for pending jobs that can start now, in rank order; None: no hint.

    Only per-job GPU requests (--gpus=N) and single-node jobs get hints: rewriting the
    node count of a per-node request would change how many GPUs it gets.
    """
    free = {n.name: n for n in nodes if n.schedulable}
    out: dict[int, tuple[str, ...] | None] = {}
    for job in ranked_pending:
        if job.gpus <= 0:
            continue
        cands = place(
            job.job_id,
            job.gpus,
            list(free.values()),
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
