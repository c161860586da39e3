"""Speed of the sharing simulator against Slurm alone on one trace, in CPU seconds.

    .venv/bin/python -m benchmarks.bench_coloc_speed --jobs 2000 --gpus 64 --load 1.3
    .venv/bin/python -m benchmarks.bench_coloc_speed --jobs 20000 --gpus 256 --load 1.0

Trace: `synth_jobs(jobs, gpus, load, seed)`, 30 % opportunistic, time limits filled as the
Slurm model fills them, 8 GPUs per node. Slurm alone is `Simulator` (FIFO, --scheduler
slurm, no preemption); shared is `SharingSimulator` with the default `ShareConfig`.
Prints CPU seconds (`time.process_time`: wall time on a shared machine says little), wall
seconds and the ratio.
"""

from __future__ import annotations

import argparse
import time

from slurm_ext.policy import PolicyConfig
from slurm_ext.sim.coloc import ShareConfig, SharingSimulator
from slurm_ext.sim.coloc_run import mark_opportunistic
from slurm_ext.sim.engine import SimConfig, Simulator
from slurm_ext.sim.run import slurm_alone, with_limits
from slurm_ext.sim.synth import synth_jobs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--gpus", type=int, default=64, help="a multiple of 8")
    ap.add_argument("--load", type=float, default=1.3)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    cluster = SimConfig(nodes=a.gpus // 8, gpus_per_node=8, preemptive=False)
    jobs = mark_opportunistic(synth_jobs(a.jobs, a.gpus, a.load, a.seed), 0.3, a.seed)
    trace = with_limits(jobs, cluster)
    fifo = PolicyConfig(policy="fifo")
    runs = (
        ("slurm alone", lambda: Simulator(trace, fifo, slurm_alone(cluster))),
        ("shared", lambda: SharingSimulator(trace, fifo, cluster, ShareConfig(seed=a.seed))),
    )
    cpu = {}
    for name, make in runs:
        w, c = time.perf_counter(), time.process_time()
        make().run()
        cpu[name] = time.process_time() - c
        print(
            f"{a.jobs} jobs, {a.gpus} GPUs, load {a.load}, {name}: {cpu[name]:.1f} CPU s, "
            f"{time.perf_counter() - w:.1f} wall s",
            flush=True,
        )
    print(f"shared / alone CPU: {cpu['shared'] / cpu['slurm alone']:.2f}")


if __name__ == "__main__":
    main()
