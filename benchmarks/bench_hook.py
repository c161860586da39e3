"""sbatch submission throughput with the slurm-ext submit hook vs without, on local clusters.

Two LocalClusters run side by side: one plain, one with JobSubmitPlugins=lua loading
etc/job_submit.lua and a predictor table of --rows rows. Each repetition submits --jobs
`sbatch --hold --wrap true` jobs to each cluster (order alternating between repetitions,
so drift on a shared machine hits both alike), with the hints of a tagged job so every
submission takes the full rewrite path. Held jobs are cancelled after each repetition.

    .venv/bin/python benchmarks/bench_hook.py [--jobs 200] [--reps 5] [--rows 2000]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slurm_ext.predict.hook import render_hook
from slurm_ext.predict.table import TableRow, atomic_write, render_table
from slurm_ext.testing.cluster import LocalCluster


def submit_batch(cluster: LocalCluster, n: int) -> float:
    """Seconds for n sequential held submissions of a tagged job."""
    argv = [
        "sbatch", "--hold", "--parsable", f"--chdir={cluster.root}/jobs", "--gres=gpu:1",
        "--comment=model=resnet50 elastic=1-2", "--wrap=true",
    ]  # fmt: skip
    t0 = time.perf_counter()
    for _ in range(n):
        subprocess.run(argv, env=cluster.env, capture_output=True, check=True, timeout=30)
    return time.perf_counter() - t0


def clear(cluster: LocalCluster) -> None:
    cluster.run("scancel", "--quiet", f"--partition={cluster.partition}", check=False)
    deadline = time.monotonic() + 30
    while (
        cluster.run("squeue", "-h", "-o", "%i", check=False).strip() and time.monotonic() < deadline
    ):
        time.sleep(0.2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rows", type=int, default=2000, help="rows in the predictor table")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-hook-") as d:
        root = Path(d) / "hooked"
        root.mkdir()
        rows = [TableRow(f"model{i}", "*", 1 + i % 32) for i in range(args.rows - 1)]
        rows.append(TableRow("resnet50", "*", 7, gpus=2))
        atomic_write(root / "predictor.tsv", render_table(rows))
        rewritten = 0
        table_bytes = (root / "predictor.tsv").stat().st_size
        plain = LocalCluster(nodes=1, cluster_name="plain")
        hooked = LocalCluster(
            nodes=1,
            root=root,
            cluster_name="hooked",
            job_submit_lua=render_hook(root / "predictor.tsv"),
        )
        plain.start()
        try:
            hooked.start()
            try:
                submit_batch(plain, 10), submit_batch(hooked, 10)  # warm up both
                clear(plain), clear(hooked)
                times: dict[str, list[float]] = {"without hook": [], "with hook": []}
                for rep in range(args.reps):
                    order = [("without hook", plain), ("with hook", hooked)]
                    for label, cluster in order if rep % 2 == 0 else order[::-1]:
                        times[label].append(submit_batch(cluster, args.jobs))
                        clear(cluster)
                rewritten = hooked.log().count("cpus_per_tres unset -> gres:gpu:7")
            finally:
                hooked.cleanup()
        finally:
            plain.cleanup()

    print(
        f"sbatch --hold throughput, {args.jobs} jobs x {args.reps} reps, table {args.rows} rows ({table_bytes} bytes)"
    )
    print(f"{'':14} {'median jobs/s':>14} {'min jobs/s':>11} {'max jobs/s':>11}")
    rates = {}
    for label, ts in times.items():
        r = [args.jobs / t for t in ts]
        rates[label] = statistics.median(r)
        print(f"{label:14} {statistics.median(r):14.1f} {min(r):11.1f} {max(r):11.1f}")
    print(f"hooked submissions rewritten: {rewritten} of {10 + args.jobs * args.reps}")
    slower = 100 * (1 - rates["with hook"] / rates["without hook"])
    print(f"hook costs {slower:+.1f}% of submission throughput (target: < 5%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
