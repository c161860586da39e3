"""Why is my job waiting? The queue as the service ranks it, one job's reasons, free GPUs.

Plain functions shared by the local CLI (`slurm-ext queue/explain`, which read the store
and Slurm on the controller), the listener's read-only view (slurm_ext/userview/http.py,
which reads the store only) and `--server URL` (slurm_ext/userview/client.py, which
fetches that view and checks it against these keys): the row and
explanation dictionaries have the same keys on every path, so the CLI prints both with
one table (slurm_ext/cli/inspect.py). A value a path cannot know (the listener never
asks Slurm for its current priority) is None and printed as "-".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from slurm_ext.core.fragmentation import stranded_gpus
from slurm_ext.core.model import JobState, Node
from slurm_ext.store.rows import DecisionRecord, JobRecord


def slurm_reason(reason: str) -> str:
    """Slurm's pending reason; "" where Slurm says "None" (a running job)."""
    return "" if reason == "None" else reason


def _times(rec: JobRecord | None, now: float) -> tuple[float | None, float | None]:
    """(wait_s, run_s) from the store's record: waited from submission up to the current
    run's start (or now), ran since that start (None while waiting)."""
    if rec is None:
        return None, None
    started = rec.run_start if rec.state != "PENDING" else None
    wait = round((started or now) - rec.submit_time, 1) if rec.submit_time else None
    return wait, (round(now - started, 1) if started is not None else None)


def queue_row(d: DecisionRecord | None, rec: JobRecord | None, now: float, **slurm: object) -> dict:
    """One queue line from the store. `slurm` overrides it with what Slurm says now
    (job_id, user, partition, state, state_code, gpus, wait_s, run_s, mode, slurm_priority,
    reason)
    on the controller's local path."""
    state = rec.state if rec else ""
    wait, run = _times(rec, now)
    row = {
        "job_id": d.job_id if d else rec.job_id if rec else None,
        "user": rec.user if rec else "",
        "partition": rec.partition if rec else "",
        "state": state,
        "state_code": JobState.parse(state).code if state else "",
        "gpus": rec.gpus if rec else 0,
        "rank": d.rank if d else None,
        "queue": d.queue if d else None,
        "gittins": d.gittins if d else None,
        "group": (d.group or None) if d else None,
        "group_samples": d.group_samples if d else 0,
        "attained_gpu_s": round(rec.attained_gpu_s(now), 1) if rec else 0.0,
        "wait_s": wait,
        "run_s": run,
        "value_set": d.value if d else None,
        "mode": d.mode if d else None,
        "slurm_priority": None,
        "reason": slurm_reason(d.slurm_reason) if d else "",
        "policy_reason": d.reason if d else "",
        "promoted": bool(d and d.promoted),
    }
    row.update(slurm)
    return row


def sort_rows(rows: list[dict]) -> list[dict]:
    """Ranked jobs in rank order, then unranked ones by job id."""
    return sorted(rows, key=lambda x: (x["rank"] is None, x["rank"] or 0, x["job_id"]))


def explain_info(
    job_id: int,
    d: DecisionRecord | None,
    rec: JobRecord | None,
    pinned: bool,
    now: float,
    **slurm: object,
) -> dict:
    """What `explain` says of one job. `slurm` overrides the store's view with Slurm's
    (slurm_state, slurm_reason, slurm_priority, managed, held, mode) where it was asked."""
    wait, _ = _times(rec, now)
    info = {
        "job_id": job_id,
        "user": rec.user if rec else "",
        "gpus": rec.gpus if rec else 0,
        "slurm_state": rec.state if rec else "GONE",
        "slurm_reason": slurm_reason(d.slurm_reason) if d else "",
        "slurm_priority": None,
        "managed": d is not None,
        "pinned": pinned,
        "held": None,
        "rank": d.rank if d else None,
        "queue": d.queue if d else None,
        "gittins": d.gittins if d else None,
        "group": (d.group or None) if d else None,
        "group_samples": d.group_samples if d else 0,
        "promoted": bool(d and d.promoted),
        "policy_reason": d.reason if d else "not ranked yet (no pass since it appeared)",
        "value_set": d.value if d else None,
        "mode": d.mode if d else None,
        "placement": list(d.placement) if d and d.placement else None,
        "attained_gpu_s": rec.attained_gpu_s(now) if rec else 0.0,
        "wait_s": wait,
        "last_run_s": rec.last_run_s if rec else 0.0,
        "current_run_s": (now - rec.run_start) if rec and rec.run_start is not None else None,
    }
    info.update(slurm)
    return info


# ---- free GPUs ------------------------------------------------------------------------


@dataclass(frozen=True)
class FreeGpus:
    """Free GPUs, and how many of them sit on nodes too full for the widest waiting job."""

    free: int
    widest_waiting: int  # GPUs of the widest waiting job (0: none waits)
    stranded: int  # free GPUs on nodes that cannot take (their share of) that job

    @property
    def fragmentation(self) -> float:
        return self.stranded / self.free if self.free else 0.0


def free_gpus(nodes: Sequence[Node], waiting_gpus: Iterable[int]) -> FreeGpus:
    """A node cannot take the widest waiting job (W GPUs) when it has fewer than
    min(W, its GPUs) free: a job wider than a node needs whole nodes."""
    usable = [n for n in nodes if n.schedulable and n.gpus > 0]
    widest = max(waiting_gpus, default=0)
    # node by node: nodes may differ in GPUs (the simulator's are all alike)
    stranded = sum(stranded_gpus([n.gpus_free], widest, n.gpus) for n in usable)
    return FreeGpus(sum(n.gpus_free for n in usable), widest, stranded)


@dataclass(frozen=True)
class Waiting:
    """A waiting job as the free-GPU figures see it: where it may run and how wide it is."""

    partition: str  # its partitions, comma-separated ("": any)
    gpu_type: str | None  # None: any type
    gpus: int


def free_gpus_by_pool(nodes: Sequence[Node], waiting: Iterable[Waiting]) -> list[dict]:
    """`free_gpus` per partition and GPU type: a job runs in one pool, so free GPUs of
    another partition or type neither fit it nor count as fragmented for it. Each pool's
    widest waiting job is the widest that may run there (its partitions name the pool's,
    its type, if any, is the pool's). Nodes with no partition known form pool "". One
    dict per pool (partition, gpu_type, free, widest_waiting, stranded, fragmentation),
    by partition then type."""
    pools: dict[tuple[str, str], list[Node]] = {}
    for n in nodes:
        if n.gpus > 0:
            for part in n.partitions or ("",):
                pools.setdefault((part, n.gpu_type or ""), []).append(n)
    jobs = list(waiting)
    out = []
    for (part, gtype), members in sorted(pools.items()):
        widths = [
            w.gpus
            for w in jobs
            if (not part or not w.partition or part in w.partition.split(","))
            and (w.gpu_type is None or w.gpu_type == gtype)
        ]
        f = free_gpus(members, widths)
        out.append(
            {
                "partition": part,
                "gpu_type": gtype or None,
                "free": f.free,
                "widest_waiting": f.widest_waiting,
                "stranded": f.stranded,
                "fragmentation": round(f.fragmentation, 3),
            }
        )
    return out


def node_rows(nodes: Sequence[Node], with_cpus: bool = False) -> list[dict]:
    """GPUs (and, for `slurm-ext nodes`, CPUs) used and free per node, by name, with its
    GPU type and partitions."""
    rows = []
    for n in sorted(nodes, key=lambda n: n.name):
        row = {
            "node": n.name,
            "state": n.state,
            "gpus": n.gpus,
            "gpus_used": n.gpus_alloc,
            "gpus_free": n.gpus_free,
            "gpu_type": n.gpu_type,
            "partitions": ",".join(n.partitions),
        }
        if with_cpus:
            row.update(cpus=n.cpus, cpus_used=n.cpus_alloc)
        rows.append(row)
    return rows
