"""Predict a live replay before running it: fidelity.py's simulator settings, no replay.

    .venv/bin/python -m benchmarks.studies.fidelity_predict --traces users2,users3 --jobs 200 \
        --modes slurm,service --speedup 600 --sim-ensemble 20 --prior DIR --prior-trace users1

A live replay is a test of the simulator only if its prediction is written down first.
This simulates each trace and mode exactly as fidelity.py would simulate a live
run of it (`sim_inputs`, same options), except for what only a live run measures: the
service's pass period is the replay's configured one, and the launch overhead and submit
lags are drawn from `--prior`, a kept live run of another trace (`--prior-trace`, with
the same --jobs/--nodes/--gpus-per-node), else taken as 0. `--sim-ensemble N` adds N
members perturbed as fidelity_ensemble.py perturbs a live run's simulation; the same
member of every mode gets the same draws, so each member's mode ratio is a paired one.
Prints per trace and mode the unperturbed and ensemble avg JCTs, and each mode's ratio to
the first mode (e.g. service / Slurm alone): unperturbed, on the ensemble means, and the
range over the paired members.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.studies import fidelity, fidelity_ctld
from benchmarks.studies.fidelity_ensemble import Draws, mean, perturb
from slurm_ext.replay.plan import auto_speedup
from slurm_ext.sim.run import simulate
from slurm_ext.sim.timelimits import fill_time_limits


def prior_draws(
    args: argparse.Namespace, gpus: int
) -> tuple[float, tuple[float, ...], tuple[float, ...]]:
    """(mean launch, launch extras, submit lags), wall s, from the prior live run's
    slurmctld logs (every mode pooled, at the prior's own speedup); zeros and nothing
    without --prior."""
    if not args.prior:
        return 0.0, (), ()
    prior = Path(args.prior) / args.prior_trace
    dirs = sorted(d for d in prior.iterdir() if (d / "row.json").exists())
    if not dirs:
        raise SystemExit(f"--prior: no live run under {prior} (expected <mode>/row.json)")
    trace = fidelity.load_trace(args.prior_trace, args.jobs, gpus, args.load, args.users)
    if trace is None:
        raise SystemExit(f"--prior-trace {args.prior_trace!r} not found")
    trace = fill_time_limits(trace, args.seed)
    speedup = json.loads((dirs[0] / "row.json").read_text())["speedup"]
    extras = fidelity_ctld.launch_extras(dirs, trace, speedup) or []
    lags = [lag for d in dirs for lag in fidelity_ctld.submit_lags(d, trace, speedup)]
    return (mean(extras) if extras else 0.0), tuple(extras), tuple(lags)


def predict(args: argparse.Namespace, name: str, modes: list[str], gpus: int) -> None:
    trace = fidelity.load_trace(name, args.jobs, gpus, args.load, args.users)
    if trace is None:
        return
    trace = fill_time_limits(trace, args.seed)
    speedup = args.speedup or auto_speedup(trace, gpus)
    launch, extras, lags = prior_draws(args, gpus)
    which = tuple(w for w in args.perturb.split(",") if w)
    single: dict[str, float] = {}
    members: dict[str, list[float]] = {}
    for mode in modes:
        policy = fidelity.sim_policy(args, mode, speedup)
        jobs, cluster = fidelity.sim_inputs(trace, args, mode, speedup, None, launch)
        single[mode] = simulate(jobs, policy, cluster)[0]["avg_jct_s"]
        draws = Draws(speedup, which, launch, extras, lags)
        members[mode] = []
        for k in range(args.sim_ensemble):
            m = perturb(jobs, cluster, draws, args.seed, k)
            members[mode].append(m.avg_jct_s(simulate(m.jobs, policy, cluster)[1]))
        ens = members[mode]
        line = f"{name} {mode} (speedup {speedup:g}, launch {launch:.3f} wall s): sim {single[mode]:.0f} s"
        if ens:
            line += (
                f"; ensemble of {len(ens)}: mean {mean(ens):.0f} s, {min(ens):.0f}-{max(ens):.0f}"
            )
        print(line, flush=True)
    base = modes[0]
    for mode in modes[1:]:
        line = f"{name} predicted {mode}/{base}: {single[mode] / single[base]:.3f}"
        if members[base]:
            paired = [a / b for a, b in zip(members[mode], members[base])]
            line += (
                f"; ensemble means {mean(members[mode]) / mean(members[base]):.3f},"
                f" paired members {min(paired):.3f}-{max(paired):.3f}"
                f" (mean {mean(paired):.3f}, {sum(r < 1 for r in paired)} of {len(paired)} below 1)"
            )
        print(line, flush=True)


def main() -> int:
    ap = fidelity.parser()
    ap.description = __doc__
    ap.add_argument("--prior", default=None, help="a kept live run's --workdir to draw from")
    ap.add_argument("--prior-trace", default="users1", help="the trace that --prior replayed")
    args = ap.parse_args()
    if not args.traces:
        ap.error("--traces is required")
    if args.sim_ensemble < 0:
        ap.error(f"--sim-ensemble must be >= 0 (got {args.sim_ensemble})")
    modes = [m for m in args.modes.split(",") if m]
    for name in args.traces.split(","):
        predict(args, name, modes, args.nodes * args.gpus_per_node)
    return 0


if __name__ == "__main__":
    sys.exit(main())
