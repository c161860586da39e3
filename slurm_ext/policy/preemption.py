"""The one preemption rule: which running jobs to requeue so that a waiting job fits.

The service (`Service._preempt`) and the simulator both call `choose_victims`, so a
simulated policy preempts exactly the jobs the live service would. Pure: it reads a
snapshot (free GPUs per node, the running jobs ranked below the waiting job, worst
first) and returns job ids; the caller requeues them.

The rule:
- Only eligible jobs go: opted in to requeue (they checkpoint), not pinned by an admin,
  past `min_run_s` in their current stint (so a job is not requeued before it could
  write a checkpoint), preempted fewer than `max_preemptions` times (0: no cap; a job
  requeued that often is left to finish, so no job is preempted without end), and, when
  the waiting job carries a gain, not costing more than it: a job whose requeue would
  lose more GPU-seconds (work since its last checkpoint plus restart overhead) than the
  waiting job gains stays.
- The worst-ranked go first, and only as many as needed.
- A job that must consolidate (fewest nodes) needs whole-node room: the nodes whose
  best-ranked job that must go ranks lowest are cleared, worst first on each, until the
  job's GPUs (and cores, when counted) are free there. Clearing the nodes that need the
  fewest GPUs freed instead evicts mid-ranked jobs, which then restart at once by
  preempting lower-ranked ones (chains of same-instant restarts, measured in the
  simulator).
- Any other job takes the worst-ranked jobs anywhere until the cluster has room; then
  the best-ranked of those whose GPUs turn out not to be needed keep running.
- If the eligible jobs cannot make room, nobody is preempted.
- Only where the waiting job can run: given its nodes (`WaitingJob.nodes`: its
  partitions, GPU type, features, not its excluded nodes), only their free GPUs count
  and only the GPUs a running job holds there are freed; a job with none there stays
  (a victim elsewhere frees GPUs the waiting job cannot use, and backfill refills them).
- The caller picks a waiting job that could start if GPUs were free
  (`policy.reasons.could_start`): never one held by a dependency, a limit, a hold.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from slurm_ext.policy.placement import min_nodes


@dataclass(frozen=True)
class RunningJob:
    """A running job as the rule sees it."""

    job_id: int
    alloc: tuple[tuple[str, int], ...]  # (node, GPUs it holds there)
    requeueable: bool  # opted in: it checkpoints and Slurm may requeue it
    ran_s: float  # length of its current stint (seconds)
    pinned: bool = False  # an admin pinned its priority: leave it alone
    cpus_per_gpu: int = 0  # cores it holds per GPU (0: cores not counted)
    lost_gpu_s: float = 0.0  # what requeueing it now costs: lost work + restart, x GPUs
    preemptions: int = 0  # times it was preempted before


@dataclass(frozen=True)
class WaitingJob:
    job_id: int
    gpus: int
    consolidate: bool  # must get the fewest nodes possible
    cpus_per_gpu: int = 0
    # GPU-seconds starting now gains it (None: requeue costs are not weighed). The shells
    # pass the wait it has paid so far x its GPUs: the rent-or-buy rule, which preempts
    # once the waiting has cost as much as the requeue would (ski rental: for this one
    # decision, within 2x of the better of waiting and preempting at once, whatever
    # the job's unknown size).
    gain_gpu_s: float | None = None
    # the nodes it may run on (None: any node); `choose_victims` frees room only there
    nodes: frozenset[str] | None = None


def eligible(
    job: RunningJob, min_run_s: float, max_preemptions: int = 0, gain_gpu_s: float | None = None
) -> bool:
    return (
        job.requeueable
        and not job.pinned
        and job.ran_s >= min_run_s
        and (max_preemptions <= 0 or job.preemptions < max_preemptions)
        and (gain_gpu_s is None or job.lost_gpu_s <= gain_gpu_s)
    )


def requeue_cost_gpu_s(
    gpus: int, progress_s: float, checkpoint_interval_s: float, restart_s: float
) -> float:
    """GPU-seconds requeueing a job now throws away: its work since the last multiple of
    `checkpoint_interval_s` (0: it loses none) plus the restart overhead, x its GPUs."""
    lost = progress_s % checkpoint_interval_s if checkpoint_interval_s > 0 else 0.0
    return gpus * (lost + restart_s)


class _Books:
    """Free GPUs (and cores) per node while victims are given back or taken again."""

    def __init__(
        self, free: Mapping[str, int], free_cpus: Mapping[str, int] | None, waiting: WaitingJob
    ) -> None:
        self.free = dict(free)
        self.cpus = dict(free_cpus) if free_cpus is not None else None
        self.w = waiting

    def give(self, v: RunningJob, sign: int = 1) -> None:
        for node, g in v.alloc:
            self.free[node] += sign * g
            if self.cpus is not None:
                self.cpus[node] += sign * g * v.cpus_per_gpu

    def offer(self, node: str) -> int:
        """The waiting job's GPUs this node could host now."""
        f = self.free[node]
        if self.cpus is None or self.w.cpus_per_gpu <= 0:
            return f
        return min(f, self.cpus[node] // self.w.cpus_per_gpu)

    def fits(self, capacity: int) -> bool:
        """Room for the waiting job: its GPUs on the fewest nodes (if it must consolidate),
        else anywhere; the test `choose_gpus` passes."""
        offers = [self.offer(n) for n in self.free]
        if not self.w.consolidate:
            return sum(offers) >= self.w.gpus
        m = min_nodes(self.w.gpus, capacity)
        return sum(sorted(offers, reverse=True)[:m]) >= self.w.gpus


def choose_victims(
    waiting: WaitingJob,
    below: Iterable[RunningJob],
    free: Mapping[str, int],
    capacity: int,
    min_run_s: float = 0.0,
    free_cpus: Mapping[str, int] | None = None,
    max_preemptions: int = 0,
) -> list[int]:
    """Ids of the running jobs to requeue so that `waiting` fits, worst-ranked first.

    below: the running jobs ranked below the waiting job, worst first (read lazily for
        a job that need not consolidate: the simulator feeds it from its heap).
    free: free GPUs per node, in node order (ties between nodes go to the first).
    capacity: GPUs per node (the largest node's).
    free_cpus: free cores per node when cores count (then `cpus_per_gpu` fields apply).
    max_preemptions: a job preempted this often already stays (0: no cap).
    Returns [] when the job fits already or the eligible jobs cannot make room.
    With `waiting.nodes`, only those nodes count: their free GPUs, and the GPUs the
    running jobs hold there (`capacity` then the largest of those nodes').
    """
    if waiting.nodes is not None:
        free, free_cpus, below = _only_on(waiting.nodes, free, free_cpus, below)
    books = _Books(free, free_cpus, waiting)
    if waiting.gpus <= 0 or books.fits(capacity):
        return []
    gain = waiting.gain_gpu_s
    if waiting.consolidate:
        cands = [v for v in below if eligible(v, min_run_s, max_preemptions, gain)]
        return _clear_nodes(waiting, cands, books, capacity)
    taken: list[RunningJob] = []
    for v in below:
        if not eligible(v, min_run_s, max_preemptions, gain):
            continue
        books.give(v)
        taken.append(v)
        if books.fits(capacity):
            break
    else:
        return []
    victims = []
    for v in reversed(taken):  # best-ranked first: keep it running if the job fits anyway
        books.give(v, -1)
        if not books.fits(capacity):
            books.give(v)
            victims.append(v.job_id)
    victims.reverse()
    return victims


def fits_now(
    waiting: WaitingJob,
    free: Mapping[str, int],
    capacity: int,
    free_cpus: Mapping[str, int] | None = None,
) -> bool:
    """Does the waiting job fit in the free GPUs of the nodes it may use (the test
    `choose_victims` starts with)?"""
    if waiting.nodes is not None:
        free, free_cpus, _ = _only_on(waiting.nodes, free, free_cpus, ())
    return waiting.gpus <= 0 or _Books(free, free_cpus, waiting).fits(capacity)


def why_no_victims(
    waiting: WaitingJob, below: Iterable[RunningJob], min_run_s: float, max_preemptions: int = 0
) -> str:
    """Why `choose_victims` requeues nobody for a waiting job that does not fit, in words
    (the first rule that leaves no candidate), for `explain` and the log."""
    nodes = waiting.nodes
    here = [v for v in below if nodes is None or any(n in nodes for n, _ in v.alloc)]
    if not here:
        return "no running job ranked below it holds GPUs on the nodes it can use"
    opted = [v for v in here if v.requeueable and not v.pinned]
    if not opted:
        return "no running job ranked below it on the nodes it can use checkpoints (opted in)"
    ripe = [v for v in opted if v.ran_s >= min_run_s]
    if not ripe:
        return f"the jobs it could requeue have run less than min_run_s ({min_run_s:.0f} s)"
    left = [v for v in ripe if max_preemptions <= 0 or v.preemptions < max_preemptions]
    if not left:
        return f"the jobs it could requeue were preempted {max_preemptions} times already"
    gain = waiting.gain_gpu_s
    if gain is not None and all(v.lost_gpu_s > gain for v in left):
        return "requeueing would lose more GPU time than it has waited (the cost rule)"
    return "the jobs it could requeue on the nodes it can use cannot free enough room"


def _only_on(
    nodes: frozenset[str],
    free: Mapping[str, int],
    free_cpus: Mapping[str, int] | None,
    below: Iterable[RunningJob],
) -> tuple[dict[str, int], dict[str, int] | None, Iterable[RunningJob]]:
    """The snapshot seen from `nodes`: their free GPUs (and cores), and the running jobs
    that hold GPUs there with only that part of their allocation (read lazily)."""
    here = {n: f for n, f in free.items() if n in nodes}
    cpus = {n: c for n, c in free_cpus.items() if n in nodes} if free_cpus is not None else None

    def inside() -> Iterable[RunningJob]:
        for v in below:
            alloc = tuple((n, g) for n, g in v.alloc if n in here)
            if alloc:
                yield v if len(alloc) == len(v.alloc) else replace(v, alloc=alloc)

    return here, cpus, inside()


def _clear_nodes(
    waiting: WaitingJob, cands: list[RunningJob], books: _Books, capacity: int
) -> list[int]:
    target = min(waiting.gpus, capacity)
    need_nodes = min_nodes(waiting.gpus, capacity)
    on_node: dict[str, list[int]] = {n: [] for n in books.free}  # candidate indices, worst first
    for i, v in enumerate(cands):
        for node, _ in v.alloc:
            if node in on_node:
                on_node[node].append(i)
    # need[node]: the position (0 = worst) of the best-ranked job that must go for the
    # node to have `target` GPUs free; -1 when it has them already
    need: dict[str, int] = {}
    for node, idxs in on_node.items():
        room = books.free[node]
        if room >= target:
            need[node] = -1
            continue
        for i in idxs:
            room += next(g for n, g in cands[i].alloc if n == node)
            if room >= target:
                need[node] = i
                break
    if len(need) < need_nodes:
        return []
    picked = sorted(need, key=need.__getitem__)[:need_nodes]  # stable: node order on ties
    gone: set[int] = set()
    share_cpus = target * waiting.cpus_per_gpu
    for node in picked:
        for i in on_node[node]:
            if books.free[node] >= target and (
                books.cpus is None or books.cpus[node] >= share_cpus
            ):
                break
            if i not in gone:
                gone.add(i)
                books.give(cands[i])
    return [cands[i].job_id for i in sorted(gone)]
