"""sbatch submission throughput with the slurm-ext submit hook vs without, on local clusters.

Two LocalClusters run side by side: one plain, one with JobSubmitPlugins=lua loading
etc/job_submit.lua and a predictor table of --rows rows. Each repetition submits --jobs
`sbatch --hold --wrap true` jobs to each cluster (order alternating between repetitions,
so drift on a shared machine hits both alike), with the hints of a tagged job so every
submission takes the full rewrite path. Held jobs are cancelled after each repetition.

    .venv/bin/python -m benchmarks.bench_hook [--jobs 200] [--reps 5] [--rows 2000]
"""

from __future__ import annotations

import argparse
import os
import shutil
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


def ctld_cpu_s(cluster: LocalCluster) -> float:
    """slurmctld's user+system CPU seconds so far (from /proc, by its pid file)."""
    assert cluster.root is not None
    pid = (cluster.root / "run" / "slurmctld.pid").read_text().strip()
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


LUA_MICRO = r"""
slurm = { SUCCESS = 0, NO_VAL16 = 65534 }
function slurm.log_info() end
function slurm.log_user() end
dofile(arg[1])
local n = tonumber(arg[2])
local function job() return { comment = "model=resnet50 elastic=1-2", tres_per_node = "gres:gpu:1",
  name = "wrap", user_name = "root", cpus_per_task = 65534 } end
slurm_job_submit(job(), {}, 0)
local t0 = os.clock()
for _ = 1, n do slurm_job_submit(job(), {}, 0) end
local hit = (os.clock() - t0) / n
local data = io.open(arg[3], "rb"):read("*a")
t0 = os.clock()
for _ = 1, 20 do slurm_ext_hook.parse_table(data) end
io.write(string.format("%.1f %.1f\n", hit * 1e6, (os.clock() - t0) / 20 * 1e6))
"""


def lua_micro(hook_source: str, table: Path, tmp: Path) -> tuple[float, float] | None:
    """(microseconds per hook call with the table cached, per full table parse) in lua5.1."""
    if shutil.which("lua5.1") is None:
        return None
    (tmp / "hook.lua").write_text(hook_source)
    (tmp / "micro.lua").write_text(LUA_MICRO)
    out = subprocess.run(
        ["lua5.1", str(tmp / "micro.lua"), str(tmp / "hook.lua"), "2000", str(table)],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout.split()  # fmt: skip
    return float(out[0]), float(out[1])


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
    ap.add_argument("--chunk", type=int, default=20, help="jobs per interleaved chunk")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-hook-") as d:
        root = Path(d) / "hooked"
        root.mkdir()
        rows = [TableRow(f"model{i}", "*", 1 + i % 32) for i in range(args.rows - 1)]
        rows.append(TableRow("resnet50", "*", 7, gpus=2))
        atomic_write(root / "predictor.tsv", render_table(rows))
        rewritten = 0
        micro = lua_micro(render_hook(root / "predictor.tsv"), root / "predictor.tsv", Path(d))
        table_bytes = (root / "predictor.tsv").stat().st_size
        plain = LocalCluster(nodes=1, cluster_name="plain")
        hooked = LocalCluster(
            nodes=1,
            root=root,
            cluster_name="hooked",
            job_submit_lua=render_hook(root / "predictor.tsv"),
        )
        empty = LocalCluster(
            nodes=1,
            cluster_name="emptylua",
            job_submit_lua="function slurm_job_submit(j, p, u) return slurm.SUCCESS end\n"
            "function slurm_job_modify(j, r, p, u) return slurm.SUCCESS end\n",
        )
        plain.start()
        try:
            hooked.start()
            empty.start()
            try:
                for c in (plain, hooked, empty):  # warm up
                    submit_batch(c, 10)
                    clear(c)
                pairs = [("without hook", plain), ("empty lua hook", empty), ("with hook", hooked)]
                times: dict[str, list[float]] = {label: [] for label, _ in pairs}
                cpu: dict[str, float] = {label: 0.0 for label, _ in pairs}
                for rep in range(args.reps):
                    spent = {label: 0.0 for label, _ in pairs}
                    for chunk in range(0, args.jobs, args.chunk):  # interleave small chunks
                        n = min(args.chunk, args.jobs - chunk)
                        order = pairs if (rep + chunk // args.chunk) % 2 == 0 else pairs[::-1]
                        for label, cluster in order:
                            c0 = ctld_cpu_s(cluster)
                            spent[label] += submit_batch(cluster, n)
                            cpu[label] += ctld_cpu_s(cluster) - c0
                    for label, cluster in pairs:
                        times[label].append(spent[label])
                        clear(cluster)
                rewritten = hooked.log().count("cpus_per_tres unset -> gres:gpu:7")
            finally:
                hooked.cleanup()
                empty.cleanup()
        finally:
            plain.cleanup()

    print(
        f"sbatch --hold throughput, {args.jobs} jobs x {args.reps} reps, table {args.rows} rows ({table_bytes} bytes)"
    )
    print(f"{'':16} {'median jobs/s':>14} {'min jobs/s':>11} {'max jobs/s':>11}")
    rates = {}
    for label, ts in times.items():
        r = [args.jobs / t for t in ts]
        rates[label] = statistics.median(r)
        print(f"{label:16} {statistics.median(r):14.1f} {min(r):11.1f} {max(r):11.1f}")
    total = args.jobs * args.reps
    for label in times:
        print(f"slurmctld CPU per submission, {label}: {1e3 * cpu[label] / total:.2f} ms")
    if micro:
        print(f"hook in lua5.1 alone: {micro[0]:.1f} us per call (table cached), "
              f"{micro[1]:.0f} us per full parse of the table (after it changes)")  # fmt: skip
    print(f"hooked submissions rewritten: {rewritten} of {10 + args.jobs * args.reps}")
    slower = 100 * (1 - rates["with hook"] / rates["without hook"])
    print(f"hook costs {slower:+.1f}% of submission throughput (target: < 5%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
