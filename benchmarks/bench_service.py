"""Service pass cost on a recorded-size snapshot: 50,000 pending + 5,000 running jobs.

Measures (a) policy + diff alone (rank, value assignment, change set), the
target (< 1 s); (b) a whole pass through `Service.run_pass` with the SQLite store and a
replay client that records writes instead of calling Slurm; (c) writes per pass when
only a few jobs change. Prints a table of absolute figures (wall and CPU seconds: on a
shared machine the CPU seconds are the steadier figure) and ratios to the targets.

    .venv/bin/python -m benchmarks.bench_service [--pending 50000] [--running 5000]

`--site-weight W` runs (b) and (c) with `policy.fairshare_site_weight` W: the service
writes the composed SiteFactor (W x the index share) and orders by Slurm's priority
(`slurm_ext/service/site_factors.py`); (a) stays the index order with rank-spaced values.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import psutil

from slurm_ext.core.model import Job, JobState, Node
from slurm_ext.policy import PolicyConfig, rank
from slurm_ext.service.fold import fold_jobs
from slurm_ext.service.loop import Service, ServiceConfig, job_view
from slurm_ext.service.priority_values import assign_values, changed
from slurm_ext.store.db import Store
from slurm_ext.testing.snapshot_client import ReplayClient


def snapshot(pending: int, running: int, seed: int = 1) -> tuple[list[Job], list[Node], float]:
    rng = random.Random(seed)
    now = 1_800_000_000.0
    nodes = [
        Node(f"n{i:04d}", state="MIXED", cpus=64, gpus=8, gpus_alloc=8)
        for i in range(max(1, running // 8 + 1))
    ]
    jobs = []
    for i in range(running):
        g = rng.choice((1, 1, 1, 2, 4, 8))
        start = now - rng.expovariate(1 / 7200)
        jobs.append(
            Job(
                job_id=i + 1,
                user=f"u{i % 200}",
                partition="gpu",
                state=JobState.RUNNING,
                gpus=g,
                submit_time=start - 600,
                start_time=start,
                nodes=(nodes[i // 8].name,),
            )
        )
    for i in range(pending):
        g = rng.choice((1, 1, 1, 2, 4, 8, 16))
        jobs.append(
            Job(
                job_id=running + i + 1,
                user=f"u{i % 200}",
                partition="gpu",
                state=JobState.PENDING,
                gpus=g,
                submit_time=now - rng.uniform(0, 86400),
                comment="model=resnet50",
            )
        )
    return jobs, nodes, now


class Timer:
    """Wall and CPU seconds of a block."""

    def __enter__(self) -> Timer:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pending", type=int, default=50_000)
    ap.add_argument("--running", type=int, default=5_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--gittins-classes", choices=("pooled", "gpus"), default=PolicyConfig().gittins_classes
    )
    ap.add_argument("--site-weight", type=float, default=0.0, help="fairshare_site_weight")
    args = ap.parse_args()
    jobs, nodes, now = snapshot(args.pending, args.running)
    history = [random.Random(2).lognormvariate(8, 2) for _ in range(5000)]
    policy = PolicyConfig(gittins_classes=args.gittins_classes)
    rows = []

    # (a) policy + diff on a snapshot whose records already exist
    records, _ = fold_jobs({}, jobs, now)
    views = [job_view(j, records[j.job_id], now) for j in jobs]
    pending_ids = {j.job_id for j in jobs if j.pending}
    times, cpus, current = [], [], {}
    for _ in range(args.repeat):
        with Timer() as t:
            decisions = rank(views, now, policy, history)
            order = [d.job_id for d in decisions if d.job_id in pending_ids]
            desired = assign_values(order, current, 1, 1_000_000_000)
            diff = changed(desired, current)
        times.append(t.wall)
        cpus.append(t.cpu)
        current = desired
    rows.append(
        (
            "policy + diff (rank, values, change set)",
            statistics.median(times),
            statistics.median(cpus),
            1.0,
        )
    )
    first_writes = len(diff) if args.repeat == 1 else len(pending_ids)

    # (b) whole passes through the service shell with the SQLite store
    with tempfile.TemporaryDirectory() as tmp:
        cfg = ServiceConfig(
            store=str(Path(tmp) / "s.db"),
            value_max=1_000_000_000,
            port=0,
            policy=replace(policy, fairshare_site_weight=args.site_weight),
        )
        client = ReplayClient(jobs, nodes)
        store = Store(cfg.store)
        store.add_completions(
            [(100_000_000 + i, g, g, now - i) for i, g in enumerate(history)], "bench"
        )
        svc = Service(cfg, client, store)
        with Timer() as first:
            svc.run_pass(now)
        writes_first = client.writes
        client.writes = 0
        steady = []
        for k in range(args.repeat):  # the median of a few: the machine may be shared
            with Timer() as t:
                svc.run_pass(now + 1 + k)
            steady.append(t)
        writes_steady = client.writes // args.repeat
        # (c) ten new jobs arrive and five finish: writes follow the change, not the queue
        new = [
            Job(
                job_id=10_000_000 + i,
                user="new",
                partition="gpu",
                state=JobState.PENDING,
                gpus=1,
                submit_time=now + 2,
            )
            for i in range(10)
        ]
        done = [replace(j, state=JobState.COMPLETED, end_time=now + 2) for j in jobs[:5]]
        client.jobs_snapshot = done + jobs[5:] + new
        client.writes = 0
        with Timer() as changed_pass:
            svc.run_pass(now + 1 + args.repeat)
        writes_changed = client.writes
        store.close()
    rows.append(("first pass, empty store (all values written)", first.wall, first.cpu, None))
    rows.append(
        (
            "steady pass, nothing changed",
            statistics.median(t.wall for t in steady),
            statistics.median(t.cpu for t in steady),
            1.0,
        )
    )
    rows.append(("pass with 10 new + 5 finished jobs", changed_pass.wall, changed_pass.cpu, None))

    print(
        f"snapshot: {args.pending} pending + {args.running} running jobs, {len(nodes)} nodes, history {len(history)}"
    )
    print(f"fairshare_site_weight (passes): {args.site_weight:g}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)")
    print(f"{'measure':<48} {'wall s':>8} {'CPU s':>8} {'target':>7} {'ratio':>7}")
    for name, secs, cpu, target in rows:
        ratio = f"{secs / target:.2f}" if target else "-"
        goal = ("<" + str(target)) if target else "-"
        print(f"{name:<48} {secs:>8.3f} {cpu:>8.3f} {goal:>7} {ratio:>7}")
    print(f"{'writes, first pass':<48} {writes_first:>9}")
    print(f"{'writes, steady pass':<48} {writes_steady:>9}")
    print(f"{'writes, 10 new + 5 finished':<48} {writes_changed:>9}")
    print(f"(policy-only first assignment wrote {first_writes} values)")
    me = psutil.Process()  # the service's own footprint, this process having run the passes
    cpu = me.cpu_times()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"process footprint (psutil): RSS {me.memory_info().rss / 2**20:.0f} MB, "
        f"peak {peak:.0f} MB, CPU {cpu.user + cpu.system:.1f} s"
    )


if __name__ == "__main__":
    main()
