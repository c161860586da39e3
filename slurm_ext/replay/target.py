"""Where a replay runs: a fresh local cluster (ours, stopped after) or a site's partition.

Either way the replay sees a `Target`: the environment for Slurm's client commands, the
partition, its shape, and whether slurmdbd keeps accounting. An existing cluster is only
read (sinfo, scontrol show config); nothing on it is changed.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from slurm_ext.testing.cluster import LocalCluster

_GRES_GPU = re.compile(r"gpu(?::[^:(,]+)?:(\d+)")


class TargetError(RuntimeError):
    """Slurm does not answer, or the partition is not usable (the message says which)."""


@dataclass
class Target:
    env: dict[str, str]
    partition: str
    nodes: int
    gpus_per_node: int
    accounting: bool
    cluster: LocalCluster | None = None  # set when the replay started it

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()


def _run(env: dict[str, str], *argv: str, timeout: float = 30.0) -> str:
    try:
        res = subprocess.run(
            list(argv), env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise TargetError(
            f"Slurm does not answer: {argv[0]} timed out after {timeout:.0f} s"
        ) from exc
    if res.returncode != 0:
        raise TargetError(
            f"Slurm does not answer: {' '.join(argv)}: {(res.stderr or res.stdout).strip()}"
        )
    return res.stdout


def existing(slurm_conf: str, partition: str) -> Target:
    """A site's cluster: its partition's nodes and GPUs (sinfo), its accounting (config)."""
    if not Path(slurm_conf).is_file():
        raise TargetError(f"{slurm_conf}: no such slurm.conf")
    env = dict(os.environ, SLURM_CONF=slurm_conf)
    env.pop("SQUEUE_FORMAT", None)
    env.pop("SQUEUE_SORT", None)
    out = _run(env, "sinfo", "-h", "-N", "-p", partition, "-o", "%N|%G")
    gpus: dict[str, int] = {}
    for line in out.splitlines():
        name, _, gres = line.partition("|")
        m = _GRES_GPU.search(gres)
        gpus[name.strip()] = int(m.group(1)) if m else 0
    if not gpus or not any(gpus.values()):
        raise TargetError(f"partition {partition!r} has no nodes with GPUs (sinfo -p {partition})")
    conf = _run(env, "scontrol", "show", "config")
    accounting = bool(re.search(r"AccountingStorageType\s*=\s*accounting_storage/slurmdbd", conf))
    # the replay shapes jobs for the widest node; a smaller node just fits fewer of them
    return Target(env, partition, len(gpus), max(gpus.values()), accounting)


def foreign_jobs(tgt: Target) -> list[str]:
    """Jobs already in the target's partition (the service would rank and write them)."""
    out = _run(tgt.env, "squeue", "-h", "-p", tgt.partition, "-t", "PD,R,CG,S", "-o", "%i %u")
    return [line.strip() for line in out.splitlines() if line.strip()]


def cpus_per_node(gpus_per_node: int) -> int:
    """Cores of a replay cluster's node: room for a job per GPU and the payloads' one
    core each (a replay job asks for one CPU per node); the simulator's `fit_cores`
    in bench_fidelity counts the same."""
    return max(16, 2 * gpus_per_node)


def local(
    root: Path, nodes: int, gpus_per_node: int, extra_conf: str, accounting: bool = True
) -> Target:
    """A fresh LocalCluster (with slurmdbd unless told not to), started and idle."""
    cluster = LocalCluster(
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        cpus_per_node=cpus_per_node(gpus_per_node),
        root=root,
        extra_conf=extra_conf,
        accounting=accounting,
    )
    cluster.start(timeout=120)
    return Target(cluster.env, cluster.partition, nodes, gpus_per_node, accounting, cluster)
