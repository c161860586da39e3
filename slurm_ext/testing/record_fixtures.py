"""Record Slurm 25.11's JSON and pyslurm's records from a live cluster, for unit tests.

    python -m slurm_ext.testing.record_fixtures --prefix /var/cache/slurm-ext/slurm-25.11.2-X \
        --out tests/data

Starts a 4-node x 4-GPU cluster from the prefix (LocalCluster), submits one job per way
of asking for GPUs (some running, some pending behind them, one held), then writes:
- squeue_25.11_recorded.json, sinfo_25.11_recorded.json, scontrol_nodes_25.11_recorded.json:
  the commands' own output, verbatim;
- pyslurm_25.11_recorded.json: the attributes the pyslurm backend reads, per job and node,
  as pyslurm 25.11 returns them (TrackableResources as {"_pyslurm_type": ..., "gres": ...},
  `get_resource_layout_per_node()` as "layout");
- truth_25.11_recorded.json: what each job asked for (by construction) and each node's
  GresUsed as `sinfo -N -O GresUsed` says it, for the tests to compare against.
pyslurm is imported after the cluster is up (it reads SLURM_CONF once).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from slurm_ext.testing.cluster import LocalCluster

# (sbatch arguments, GPUs the job asks for in all): running ones first, then pending ones
JOBS: list[tuple[list[str], int]] = [
    (["--gpus=2", "-J", "per-job"], 2),
    (["--gres=gpu:2", "-J", "gres"], 2),
    (["--gpus-per-node=2", "-J", "per-node"], 2),
    (["--gpus-per-task=1", "-n", "2", "-J", "per-task"], 2),
    (["-N", "2", "--gres=gpu:4", "-J", "two-nodes"], 8),
    (["--gpus=2", "-J", "pending-per-job"], 2),
    (["--gpus-per-task=1", "-n", "3", "-J", "pending-per-task"], 3),
    (["-N", "2", "--gpus-per-node=4", "-J", "pending-two-nodes"], 8),
    (["--gres=gpu:1", "--hold", "-J", "held"], 1),
    (["-J", "cpu-only"], 0),
]
JOB_ATTRS = (
    "id name user_name user_id account partition qos state state_reason priority nice "
    "num_nodes ntasks cpus cpus_per_gpu submit_time start_time end_time time_limit "
    "allocated_nodes required_nodes excluded_nodes comment admin_comment is_requeueable "
    "tres_per_node gres_per_node tres_per_job tres_per_task allocated_tres requested_tres"
).split()
NODE_ATTRS = (
    "name state total_cpus allocated_cpus configured_gres allocated_gres active_features "
    "available_features partitions real_memory weight"
).split()


def plain(value: Any) -> Any:
    """A pyslurm attribute as JSON: TrackableResources by their gres, the rest as is."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if hasattr(value, "gres"):
        gres = {
            str(k): {"count": getattr(g, "count", g), "type": getattr(g, "type", None)}
            for k, g in (value.gres or {}).items()
        }
        return {"_pyslurm_type": "TrackableResources", "gres": gres}
    return str(value)


def record(cluster: LocalCluster, out: Path) -> None:
    ids = {}
    for args, gpus in JOBS:
        ids[cluster.sbatch(*args, wrap="sleep 600")] = (" ".join(args), gpus)
    cluster.run("sleep", "4")  # let the scheduler start what fits
    out.mkdir(parents=True, exist_ok=True)
    for name, argv in (
        ("squeue", ["squeue", "--json"]),
        ("sinfo", ["sinfo", "--json"]),
        ("scontrol_nodes", ["scontrol", "--json", "show", "nodes"]),
    ):
        (out / f"{name}_25.11_recorded.json").write_text(cluster.run(*argv))
    os.environ["SLURM_CONF"] = str(cluster.conf_path)
    import pyslurm

    jobs = []
    for job in pyslurm.Jobs.load().values():
        rec = {a: plain(getattr(job, a, None)) for a in JOB_ATTRS}
        rec["layout"] = plain(job.get_resource_layout_per_node())
        jobs.append(rec)
    nodes = [
        {a: plain(getattr(n, a, None)) for a in NODE_ATTRS} for n in pyslurm.Nodes.load().values()
    ]
    (out / "pyslurm_25.11_recorded.json").write_text(
        json.dumps({"pyslurm": pyslurm.__version__, "jobs": jobs, "nodes": nodes}, indent=1)
    )
    used = {}  # Slurm's own per-node view, to compare both backends with
    for line in cluster.run("sinfo", "-N", "-h", "-O", "NodeList:|,GresUsed:|").splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 2 and parts[0]:
            used[parts[0]] = parts[1]
    truth = {
        "slurm": cluster.run("scontrol", "--version").strip(),
        "jobs": {str(i): {"args": a, "gpus": g} for i, (a, g) in ids.items()},
        "gres_used": used,
    }
    (out / "truth_25.11_recorded.json").write_text(json.dumps(truth, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prefix", type=Path, required=True, help="Slurm 25.11 installation")
    ap.add_argument("--out", type=Path, default=Path("tests/data"))
    args = ap.parse_args()
    with LocalCluster(nodes=4, gpus_per_node=4, cpus_per_node=16, prefix=args.prefix) as c:
        record(c, args.out)
    print(f"recorded into {args.out}")


if __name__ == "__main__":
    main()
