"""Record what a live heterogeneous cluster says of its nodes and partitions, for unit tests.

    python -m slurm_ext.testing.record_cluster --out tests/data                 # Debian's 22.05
    python -m slurm_ext.testing.record_cluster --prefix /var/cache/slurm-ext/slurm-25.11.2-X \
        --out tests/data

Starts HETEROGENEOUS (two A100 nodes with 4 GPUs in partition a100, two H100 nodes with 8
in partition h100, each partition its own MaxTime; accounting with the GpuQos cap of 4
GPUs per user), runs two 2-GPU H100 jobs and one more that the cap holds back, then
writes, VERSION being 22.05 or 25.11:
- hetero_partitions_VERSION_recorded.txt: `scontrol show partition -o`, verbatim;
- hetero_nodes_VERSION_recorded.json: the node JSON the CLI backend reads there
  (`sinfo --json` on 22.05, `scontrol --json show nodes` on 25.11), verbatim;
- hetero_slurm_VERSION_recorded.conf: the cluster's own slurm.conf;
- hetero_truth_VERSION_recorded.json: `sinfo -o "%P %G %l"` and squeue's state and
  reason of each job, as Slurm printed them;
- on 25.11 with pyslurm: hetero_pyslurm_25.11_recorded.json, the attributes the pyslurm
  backend reads of each pyslurm.Partition and pyslurm.Node.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from slurm_ext.testing.accounting import GpuQos
from slurm_ext.testing.cluster import LocalCluster
from slurm_ext.testing.cluster_conf import NodeGroup
from slurm_ext.testing.record_fixtures import plain

HETEROGENEOUS = (
    NodeGroup(
        "a100", count=2, gpus=4, gpu_type="a100", features=("a100", "ib"), max_time="2:00:00"
    ),
    NodeGroup("h100", count=2, gpus=8, gpu_type="h100", max_time="1-00:00:00", weight=10),
)
QOS = GpuQos(name="gpu16", gpus_per_user=4)
# (sbatch arguments): two fill the QOS's 4 GPUs, the third waits on it
JOBS = (
    ("-p", "h100", "--gres=gpu:h100:2", "-J", "h100-a"),
    ("-p", "h100", "--gres=gpu:h100:2", "-J", "h100-b"),
    ("-p", "a100", "--gres=gpu:a100:2", "-J", "over-qos"),
)
PARTITION_ATTRS = ("name", "nodes", "max_time", "is_default", "state")
NODE_ATTRS = (
    "name state total_cpus allocated_cpus configured_gres allocated_gres active_features "
    "available_features partitions real_memory weight"
).split()


def heterogeneous_cluster(prefix: Path | None = None, root: Path | None = None) -> LocalCluster:
    """The recorded cluster, not yet started (the live tests start the same one)."""
    return LocalCluster(
        node_groups=HETEROGENEOUS, prefix=prefix, root=root, accounting=True, gpu_qos=QOS
    )


def version_name(cluster: LocalCluster) -> str:
    major, minor = cluster.version
    return f"{major}.{minor:02d}"


def record(cluster: LocalCluster, out: Path) -> None:
    version = version_name(cluster)
    ids = [cluster.sbatch(*args, wrap="sleep 600") for args in JOBS]
    time.sleep(4)  # let the scheduler start what fits
    out.mkdir(parents=True, exist_ok=True)
    nodes_argv = (
        ["sinfo", "--json"] if version == "22.05" else ["scontrol", "--json", "show", "nodes"]
    )
    files = {
        "partitions": ("txt", cluster.run("scontrol", "show", "partition", "-o")),
        "nodes": ("json", cluster.run(*nodes_argv)),
        "slurm": ("conf", cluster.conf_path.read_text()),
    }
    for name, (ext, text) in files.items():
        (out / f"hetero_{name}_{version}_recorded.{ext}").write_text(text)
    jobs = {}
    for job, args in zip(ids, JOBS):
        state = cluster.run("squeue", "-h", "-j", str(job), "-o", "%T|%r|%N|%q").strip()
        jobs[str(job)] = {"args": " ".join(args), "squeue": state}
    truth = {
        "slurm": cluster.run("scontrol", "--version").strip(),
        "sinfo": cluster.run("sinfo", "-h", "-o", "%P %G %l").splitlines(),
        "jobs": jobs,
    }
    (out / f"hetero_truth_{version}_recorded.json").write_text(json.dumps(truth, indent=1))
    if version != "22.05":
        record_pyslurm(cluster, out, version)


def record_pyslurm(cluster: LocalCluster, out: Path, version: str) -> None:
    """pyslurm's records of the same cluster (pyslurm reads SLURM_CONF once, here)."""
    os.environ["SLURM_CONF"] = str(cluster.conf_path)
    try:
        import pyslurm
    except ImportError:
        print("pyslurm is not installed: no pyslurm records")
        return

    parts = [
        {a: plain(getattr(p, a, None)) for a in PARTITION_ATTRS}
        for p in pyslurm.Partitions.load().values()
    ]
    nodes = [
        {a: plain(getattr(n, a, None)) for a in NODE_ATTRS} for n in pyslurm.Nodes.load().values()
    ]
    (out / f"hetero_pyslurm_{version}_recorded.json").write_text(
        json.dumps({"pyslurm": pyslurm.__version__, "partitions": parts, "nodes": nodes}, indent=1)
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prefix", type=Path, default=None, help="a Slurm installation")
    ap.add_argument("--out", type=Path, default=Path("tests/data"))
    args = ap.parse_args()
    with heterogeneous_cluster(args.prefix) as cluster:
        record(cluster, args.out)
    print(f"recorded into {args.out}")


if __name__ == "__main__":
    main()
