"""Record real `sacct` output from a live accounting cluster, as golden data for the parser.

    python -m slurm_ext.testing.record_sacct --out tests/data            # Debian's 22.05
    python -m slurm_ext.testing.record_sacct --prefix /var/cache/slurm-ext/slurm-25.11.2-X \
        --out tests/data                                                 # 25.11

Starts a 2-node x 2-GPU cluster with a private MariaDB + slurmdbd (LocalCluster with
accounting), runs one job per case below to its end, then writes what the service's
history command (`slurm.sacct.sacct_argv`) prints, verbatim, to sacct_<release>_recorded.txt,
and what each job was by construction to sacct_<release>_truth.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from slurm_ext.slurm.sacct import sacct_argv
from slurm_ext.testing.cluster import LocalCluster

# name -> (sbatch arguments, shell command, GPUs it holds, whether sacct's history keeps it)
CASES: dict[str, tuple[list[str], str, int, bool]] = {
    "gres-two": (["--gres=gpu:2", "-t", "10"], "sleep 2", 2, True),
    "per-job-one": (["--gpus=1", "-t", "1-00:00:00"], "sleep 1", 1, True),
    "two-nodes": (["-N", "2", "--gres=gpu:1"], "sleep 1", 2, True),
    "fails": (["--gres=gpu:1"], "sleep 1; exit 3", 1, True),
    "cpu-only": ([], "sleep 1", 0, False),
    "cancelled-pending": (["--gres=gpu:2", "--hold"], "sleep 1", 2, False),
}


def record(out: Path, prefix: Path | None) -> None:
    since = time.time() - 60
    with LocalCluster(nodes=2, gpus_per_node=2, prefix=prefix, accounting=True) as cluster:
        ids = {
            name: cluster.sbatch("-J", name, *args, wrap=wrap)
            for name, (args, wrap, _, _) in CASES.items()
        }
        cluster.run("scancel", str(ids["cancelled-pending"]))
        deadline = time.monotonic() + 120
        text = ""
        while time.monotonic() < deadline:
            text = cluster.run(*sacct_argv(since))
            ended = {line.split("|")[0] for line in text.splitlines()[1:]}
            # a job cancelled while held never reaches slurmdbd (22.05 and 25.11)
            if all(str(ids[name]) in ended for name in CASES if name != "cancelled-pending"):
                break
            time.sleep(1.0)
        else:
            raise SystemExit(f"jobs {ids} did not all end in sacct within 120 s:\n{text}")
        major, minor = cluster.version
        version = f"{major}.{minor:02d}"
        (out / f"sacct_{version}_recorded.txt").write_text(text)
        truth = {
            str(ids[name]): {"name": name, "gpus": gpus, "kept": kept, "args": args}
            for name, (args, _, gpus, kept) in CASES.items()
        }
        (out / f"sacct_{version}_truth.json").write_text(json.dumps(truth, indent=1) + "\n")
        print(f"wrote sacct_{version}_recorded.txt ({len(text.splitlines())} lines) to {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prefix", type=Path, default=None, help="a Slurm installation (25.11)")
    ap.add_argument("--out", type=Path, default=Path("tests/data"))
    args = ap.parse_args()
    record(args.out, args.prefix)


if __name__ == "__main__":
    main()
