"""Same decisions before and after a simulator speed change: a hash per run.

    mkdir /tmp/old && git archive main | tar -x -C /tmp/old   # the code before
    (cd /tmp/old && $OLDPWD/.venv/bin/python -m benchmarks.studies.sim_equivalence \
        --save /tmp/before.json)
    .venv/bin/python -m benchmarks.studies.sim_equivalence --check /tmp/before.json  # this tree
    ... --jobs 20000 --small 10000 --save / --check ...  # larger runs (minutes)

A speed change must not change any decision, so each case hashes every job's first
start, finish, preemption count and timeout flag, plus the run's preemption and event
counts (`Simulator.seq`). Cases: the `bench_sim` speed shapes (philly, wide, bursty,
mixed at seeds 1 and 3, and users) on 125 x 8 GPUs, and a smaller trace on 8 x 8 GPUs under
every policy x scheduler and a few mechanics (no preemption, a preemptible fraction
with checkpoints, a pass interval, CPUs, spread placement, the all-preemptible
clearing tables, one preemption per pass, a requeue cap).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

from benchmarks.bench_sim import SHAPES
from slurm_ext.policy import PolicyConfig
from slurm_ext.sim.engine import SimConfig, Simulator
from slurm_ext.sim.synth import synth_jobs
from slurm_ext.sim.timelimits import fill_time_limits
from slurm_ext.sim.traces import TraceJob
from slurm_ext.sim.users import synth_user_jobs

Case = tuple[str, Callable[[], list[TraceJob]], PolicyConfig, SimConfig]


def run_hash(trace: list[TraceJob], cfg: PolicyConfig, cluster: SimConfig) -> tuple[str, float]:
    """The run's decision hash and its CPU seconds."""
    c0 = time.process_time()
    sim = Simulator(trace, cfg, cluster)
    jobs = sim.run()
    cpu = time.process_time() - c0
    h = hashlib.sha256()
    for j in sorted(jobs, key=lambda j: j.id):
        h.update(repr((j.id, j.first_start, j.finish, j.preemptions, j.timed_out)).encode())
    h.update(repr((sim.preemptions, sim.timeouts, sim.seq)).encode())
    return h.hexdigest()[:16], cpu


def cases(big: int, small: int) -> Iterator[Case]:
    gittins = PolicyConfig(policy="gittins")
    wide_cluster = SimConfig(nodes=125, gpus_per_node=8, placement="consolidate")
    for shape, reshape in SHAPES.items():
        for seed in (1, 3):

            def trace(reshape=reshape, seed=seed) -> list[TraceJob]:
                jobs = reshape(synth_jobs(big, 1000, load=1.05, seed=seed))
                return fill_time_limits(jobs, seed=0)

            yield f"{shape}-{big}-s{seed}", trace, gittins, wide_cluster

    def users() -> list[TraceJob]:
        return fill_time_limits(synth_user_jobs(big, 1000, load=1.0, seed=1), seed=0)

    yield f"users-{big}", users, gittins, wide_cluster

    def small_trace() -> list[TraceJob]:
        return fill_time_limits(synth_jobs(small, 64, load=1.05, seed=2), seed=0)

    eight = SimConfig(nodes=8, gpus_per_node=8)
    for policy in ("gittins", "las", "fifo", "multifactor", "srtf", "sjf"):
        for scheduler in ("slurm", "greedy", "strict"):
            cl = replace(eight, scheduler=scheduler)
            yield f"8x8-{policy}-{scheduler}", small_trace, PolicyConfig(policy=policy), cl
    variations = {
        "no-preempt": (gittins, replace(eight, preemptive=False)),
        "fraction-ckpt": (
            gittins,
            replace(eight, preemptible_fraction=0.5, checkpoint_interval_s=600.0),
        ),
        "pass-60": (gittins, replace(eight, pass_interval_s=60.0)),
        "cpus": (gittins, replace(eight, cpus_per_node=48)),
        "spread": (replace(gittins, policy="multifactor"), replace(eight, placement="spread")),
        "all-preemptible": (replace(gittins, max_preemptions=0, preemption_cost=False), eight),
        "one-per-pass": (gittins, replace(eight, one_preemption_per_pass=True)),
        "requeue-cap": (gittins, replace(eight, max_requeues_per_pass=2, requeue_delay_s=121)),
        "fraction-greedy": (
            replace(gittins, policy="las"),
            replace(eight, preemptible_fraction=0.3, scheduler="greedy"),
        ),
    }
    for name, (cfg, cl) in variations.items():
        yield f"8x8-{name}", small_trace, cfg, cl


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=5000, help="jobs per 125 x 8 case")
    ap.add_argument("--small", type=int, default=2500, help="jobs per 8 x 8 case")
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    ap.add_argument("--save", type=Path, help="write the hashes to this JSON file")
    ap.add_argument("--check", type=Path, help="compare with hashes saved by --save")
    args = ap.parse_args()
    want = json.loads(args.check.read_text()) if args.check else {}
    got, bad = {}, []
    for name, trace, cfg, cl in cases(args.jobs, args.small):
        if args.only not in name:
            continue
        got[name], cpu = run_hash(trace(), cfg, cl)
        verdict = ""
        if args.check:
            verdict = "same" if want.get(name) == got[name] else f"DIFFERS (was {want.get(name)})"
            if verdict != "same":
                bad.append(name)
        print(f"{name:28} {got[name]} {cpu:7.2f} CPU s {verdict}", flush=True)
    if args.save:
        args.save.write_text(json.dumps(got, indent=1) + "\n")
    if bad:
        sys.exit(f"{len(bad)} cases differ: {', '.join(bad)}")


if __name__ == "__main__":
    main()
