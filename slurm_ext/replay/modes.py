"""One replay mode end to end: a cluster (fresh or given), the service if the mode has one,
the trace submitted and followed, its summary row; everything started is stopped."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from slurm_ext.policy import PolicyConfig
from slurm_ext.replay import placement as placement_
from slurm_ext.replay import service, target
from slurm_ext.replay.metrics import summarize
from slurm_ext.replay.plan import limit_fidelity, plan
from slurm_ext.replay.run import Replay
from slurm_ext.replay.slurmconf import replay_conf


def save_records(path: Path, records: dict, submitted: dict) -> None:
    """Per trace job: Slurm's id, final state, submit and runs (epoch start, end),
    requeues."""
    out = {
        str(job.trace.job_id): {
            "slurm_id": sid,
            "submit": records[sid].submit if sid in records else None,
            "state": records[sid].state if sid in records else "UNKNOWN",
            "runs": records[sid].runs if sid in records else [],
            "requeues": records[sid].requeues if sid in records else 0,
            "limit_min": job.limit_min,
            "work_wall_s": job.work_wall_s,
        }
        for sid, job in submitted.items()
    }
    path.write_text(json.dumps(out, indent=1))


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class ReplayOptions:
    """How a trace is replayed, the same in every mode (`slurm-ext replay`'s options)."""

    speedup: float
    checkpoint_interval_s: float = 0.0  # trace seconds between a job's checkpoints
    preemptible_fraction: float = 0.0
    seed: int = 0
    policy: PolicyConfig | None = None  # the service's policy (None: as shipped)
    placement: str | None = None  # the service's placement hints mode (None: off, as shipped)


@dataclass(frozen=True)
class ClusterSpec:
    """Where a replay runs: a fresh local cluster of this shape, or, with `slurm_conf`,
    that cluster's `partition` (then its own shape)."""

    nodes: int
    gpus_per_node: int
    slurm_conf: str | None = None
    partition: str | None = None
    accounting: bool = True  # a fresh cluster's slurmdbd


def replay_mode(
    jobs,
    mode: str,
    workdir: Path,
    options: ReplayOptions,
    cluster: ClusterSpec,
    stop_event=None,
) -> dict[str, float]:
    """One mode on a fresh local cluster (or the given partition); its summary row."""
    label = f"[{mode}] "
    speedup, placement = options.speedup, options.placement
    tgt = None
    if cluster.slurm_conf:
        tgt = target.existing(cluster.slurm_conf, cluster.partition or "")
    if tgt is not None and mode != "slurm":
        others = target.foreign_jobs(tgt)
        if others:  # the service writes the priority of every job in its partition
            raise target.TargetError(
                f"mode {mode} needs partition {tgt.partition!r} to itself: it holds "
                f"{len(others)} other job(s) (e.g. {others[0]}) whose priority the service "
                "would change"
            )
    shape = (tgt.nodes, tgt.gpus_per_node) if tgt else (cluster.nodes, cluster.gpus_per_node)
    planned = plan(jobs, speedup, *shape, mode, options.preemptible_fraction, options.seed)
    if (workdir / "jobs").exists():  # old checkpoints, state and records would mix in
        raise target.TargetError(f"{workdir} already holds a replay; give a fresh --workdir")
    workdir.mkdir(parents=True, exist_ok=True)
    proc = None
    replay = None
    try:
        if tgt is None:
            conf = replay_conf(speedup, max(j.limit_min for j in planned))
            size = f"{cluster.nodes} x {cluster.gpus_per_node} GPUs"
            _say(f"{label}starting a local cluster ({size}) in {workdir}/cluster")
            tgt = target.local(
                workdir / "cluster", cluster.nodes, cluster.gpus_per_node, conf, cluster.accounting
            )
        if mode != "slurm":
            cfg = service.write_config(
                workdir / "service.toml",
                tgt.env["SLURM_CONF"],
                tgt.partition,
                speedup,
                preemption=mode == "service-requeue",
                policy=options.policy,
                checkpoint_interval_s=options.checkpoint_interval_s,
            )
            if placement:
                placement_.enable_hints(cfg, placement)
            proc = service.start(cfg, workdir / "service.log")
            _say(f"{label}service started (pid {proc.pid}, log {workdir}/service.log)")
        checkpoint_s = options.checkpoint_interval_s / speedup
        replay = Replay(tgt, planned, workdir / "jobs", checkpoint_s, label, _say)
        if stop_event is not None:
            replay.stop_event = stop_event
        records, epoch = replay.run()
        save_records(workdir / "records.json", records, replay.submitted)
        # which nodes each run held (sacct): waits of wide jobs, GPUs idle for fragmentation
        frag = placement_.record(workdir, tgt, replay.submitted, epoch, speedup)
        row = summarize(records.values(), tgt.total_gpus, speedup)
        row["mode"] = mode  # type: ignore[assignment]
        row["speedup"] = speedup
        row["limit_stretch"] = limit_fidelity(planned, speedup)
        row["accounting"] = tgt.accounting  # type: ignore[assignment]
        row["placement_hints"] = placement or "off" if mode != "slurm" else "-"  # type: ignore[assignment]
        row.update({k: v for k, v in frag.items() if k not in row})
        return row
    finally:
        if replay is not None and replay.submitted and tgt is not None and tgt.cluster is None:
            _say(f"{label}cancelled the {len(replay.submitted)} jobs this replay submitted")
        service.stop(proc)
        if tgt is not None and tgt.cluster is not None:
            tgt.stop()
            _say(f"{label}stopped the local cluster's daemons")
