"""Per-job diagnosis of the non-preemptive target (issue 16): which jobs lose against
Slurm alone, and how the wait guard lifts them.

One trace (bench_targets.py's: recurring users or --model flat, 2,000 jobs, 8 x 8 GPUs,
consolidated placement), run under Slurm alone (fifo, no preemption), the gittins policy
with --set overrides (no preemption) and, for reference, the SJF oracle. Prints, per GPU
width, the jobs' summed JCT (h) and mean wait to first start (h) in each run; the kinds
(user, job name, GPUs) that lose most against Slurm alone; and, for the gittins run, per
width, how many jobs the wait guard lifted, how long they waited for it and how long
from the guard to their start, and the most jobs guarded at once.

    .venv/bin/python benchmarks/diag_np.py --seed 2
    .venv/bin/python benchmarks/diag_np.py --seed 5 --load 1.0
    .venv/bin/python benchmarks/diag_np.py --seed 11 --set '{"gittins_whole_order": "run_time"}'
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from dataclasses import replace

from slurm_ext.policy import PolicyConfig
from slurm_ext.policy.guards import GUARDED
from slurm_ext.sim.engine import SimConfig, Simulator
from slurm_ext.sim.synth import synth_jobs
from slurm_ext.sim.timelimits import fill_time_limits
from slurm_ext.sim.users import synth_user_jobs

WIDTHS = (1, 2, 4, 8, 16)


def trace_for(model: str, seed: int, load: float, n: int):
    if model == "flat":
        return fill_time_limits(synth_jobs(n, 64, load=load, seed=seed), seed)
    return synth_user_jobs(n, 64, load=load, seed=seed)


def run(trace, cfg: PolicyConfig, seed: int, guarded: dict[int, float] | None = None):
    """The finished jobs by id; `guarded` collects each job's first guarded pass time."""
    most = [0]

    def watch(sim: Simulator, now: float) -> None:
        n = 0
        for heap in sim.keys.pending.values():
            for _, ver, _, job in heap:
                if ver == job.key_ver and not job.running and job.key[2] == GUARDED:
                    n += 1
                    guarded.setdefault(job.id, now)
        most[0] = max(most[0], n)

    cl = SimConfig(nodes=8, gpus_per_node=8, preemptive=False, seed=seed)
    sim = Simulator(trace, cfg, cl, on_pass=watch if guarded is not None else None)
    return {j.id: j for j in sim.run()}, most[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--load", type=float, default=1.1)
    ap.add_argument("--model", default="users", help="users (default) | flat")
    ap.add_argument("--set", default="{}", help="PolicyConfig overrides (JSON) for gittins")
    args = ap.parse_args()
    trace = trace_for(args.model, args.seed, args.load, args.jobs)
    slurm, _ = run(trace, PolicyConfig(policy="fifo"), args.seed)
    sjf, _ = run(trace, PolicyConfig(policy="sjf"), args.seed)
    first: dict[int, float] = {}
    np_, most = run(trace, replace(PolicyConfig(), **json.loads(args.set)), args.seed, first)

    def jct(runs, ids) -> float:
        return sum(runs[i].finish - runs[i].submit for i in ids) / 3600

    def wait(runs, ids) -> float:
        return sum(runs[i].first_start - runs[i].submit for i in ids) / 3600 / max(1, len(ids))

    every = list(slurm)
    print(
        f"# {args.model} seed {args.seed}, load {args.load}, overrides {args.set}: avg JCT vs "
        f"Slurm alone: gittins {jct(np_, every) / jct(slurm, every):.3f}, "
        f"sjf {jct(sjf, every) / jct(slurm, every):.3f}"
    )
    print("gpus  jobs  JCT-h slurm  gittins      sjf | wait-h slurm gittins   sjf | guarded"
          "  to-guard-h  guard-to-start-h")  # fmt: skip
    for g in WIDTHS:
        ids = [i for i in every if slurm[i].gpus == g]
        if not ids:
            continue
        gd = [i for i in ids if i in first]
        to_guard = sum(first[i] - np_[i].submit for i in gd) / 3600 / max(1, len(gd))
        to_start = sum(np_[i].first_start - first[i] for i in gd) / 3600 / max(1, len(gd))
        print(
            f"{g:4d} {len(ids):5d} {jct(slurm, ids):11.0f} {jct(np_, ids):8.0f} "
            f"{jct(sjf, ids):8.0f} | {wait(slurm, ids):11.2f} {wait(np_, ids):7.2f} "
            f"{wait(sjf, ids):5.2f} | {len(gd):7d} {to_guard:11.1f} {to_start:17.1f}"
        )
    print(f"most jobs guarded at once: {most}")
    kinds: dict[tuple, list[int]] = defaultdict(list)
    for i in every:
        kinds[(slurm[i].user, slurm[i].name, slurm[i].gpus)].append(i)
    loss = sorted(kinds.items(), key=lambda kv: jct(slurm, kv[1]) - jct(np_, kv[1]))
    print("kinds losing most (gittins - slurm JCT-h): user name gpus jobs loss mean-run-h")
    for (user, name, g), ids in loss[:5]:
        run_h = sum(slurm[i].duration for i in ids) / 3600 / len(ids)
        delta = jct(np_, ids) - jct(slurm, ids)
        print(f"  {user} {name} {g} {len(ids)} {delta:+.0f} {run_h:.1f}")


if __name__ == "__main__":
    main()
