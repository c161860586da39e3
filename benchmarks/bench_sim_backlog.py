"""Simulator speed against the backlog: CPU microseconds per event by pending-queue length.

    .venv/bin/python -m benchmarks.bench_sim_backlog --jobs 100000 --shape philly --load 1.2
    .venv/bin/python -m benchmarks.bench_sim_backlog --jobs 50000 --shape philly --load 2.0
    .venv/bin/python -m benchmarks.bench_sim_backlog --jobs 20000 --placement spread

A per-event cost that grows with the queue is what makes a trace of another shape slow:
a load above 1 keeps a backlog that never drains. The run is `bench_sim`'s speed run
(`speed_trace`: seed 1, time limits seed 0; 125 nodes x 8 GPUs, preemptive 2D-Gittins,
`--scheduler slurm`), sampled every 5,000 event batches: each window's CPU seconds and
events go to the row of its mean pending-job count; each row's cost per event is also
given against the row of the shortest queue.
"""

from __future__ import annotations

import argparse
import time

from benchmarks.bench_sim import SHAPES, USERS, speed_trace
from slurm_ext.policy import PolicyConfig
from slurm_ext.sim.engine import SimConfig, Simulator

ROWS = (0, 100, 300, 1000, 3000, 10000, 30000)  # pending jobs: each row from this many


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100000)
    ap.add_argument("--shape", default="philly", choices=[*SHAPES, USERS])
    ap.add_argument("--load", type=float, default=1.2)
    ap.add_argument("--placement", default="consolidate", choices=("consolidate", "spread"))
    args = ap.parse_args()
    trace = speed_trace(args.jobs, args.load, args.shape)
    cluster = SimConfig(nodes=125, gpus_per_node=8, placement=args.placement)
    samples: list[tuple[float, int, int]] = []  # (CPU s, events, pending jobs)

    def sample(done: int, total: int, now: float) -> None:
        samples.append((time.process_time(), sim.seq, sim.state.n_pending))

    c0, t0 = time.process_time(), time.perf_counter()
    sim = Simulator(trace, PolicyConfig(policy="gittins"), cluster, progress=sample)
    start = (time.process_time(), sim.seq, 0)
    sim.run()
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    print(
        f"{args.shape}, {args.jobs} jobs, load {args.load}, {args.placement}: {cpu:.1f} CPU s, "
        f"{wall:.1f} s wall, {sim.preemptions} preemptions, {sim.seq} events, "
        f"at most {max((s[2] for s in samples), default=0)} pending"
    )
    rows: dict[int, list[float]] = {}
    for prev, cur in zip([start, *samples], samples, strict=False):
        queue = (prev[2] + cur[2]) / 2
        row = max(r for r in ROWS if queue >= r)
        acc = rows.setdefault(row, [0.0, 0.0, 0.0])
        acc[0] += cur[0] - prev[0]
        acc[1] += cur[1] - prev[1]
        acc[2] += 1
    print("| pending jobs | windows | events | CPU s | us per event | vs the shortest queue |")
    print("|---|---|---|---|---|---|")
    per_event = {row: 1e6 * c / max(e, 1) for row, (c, e, _) in rows.items()}
    base = per_event[min(per_event)] if per_event else 0.0
    for row, (c, e, w) in sorted(rows.items()):
        us = per_event[row]
        ratio = f"{us / base:.2f}" if base else "-"
        print(f"| {row:,}+ | {int(w)} | {int(e):,} | {c:.1f} | {us:.1f} | {ratio} |")


if __name__ == "__main__":
    main()
