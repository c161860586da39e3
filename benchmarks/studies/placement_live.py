"""Consolidation placement live: Slurm's own node choice against the
service's placement hints, on a real slurmctld, with the simulator's figures beside them.

    .venv/bin/slurm-ext trace synth --jobs 150 --gpus 32 --load 1.1 --seed 3 -o t.csv
    .venv/bin/python -m benchmarks.studies.placement_live --trace t.csv --speedup 1800 \
        --workdir DIR                  # three live replays (~6 min each) + the simulator
    .venv/bin/python -m benchmarks.studies.placement_live --trace t.csv --speedup 1800 \
        --live-from DIR                # the table again from DIR's allocations.json files

Runs, each live on a fresh local cluster (--nodes x --gpus-per-node, slurmdbd on):
  slurm          Slurm alone: cons_tres picks the nodes, multifactor + backfill order
  service        `slurm-ext serve` beside it, preemption off, placement hints off (shipped)
  service-hints  the same with `placement = true` (--hints mode): the service names the
                 nodes (ReqNodeList) of each waiting job that can start now
and simulated with matching settings (the limits Slurm enforced, the replay's backfill
and service cycles in trace seconds): slurm = fifo, service = the default gittins policy;
the simulator always places by `choose_gpus` (fewest nodes, best fit), i.e. it models the
hints' choice, not cons_tres's. Per run (`core/fragmentation.summarize`, one definition
for both): mean wait to first start of 4- and 8-GPU jobs, GPU time stranded by
fragmentation and free while jobs wait (shares of the cluster's GPU time), avg JCT, and
the share of single-node starts that went to a GPU best fit (how each run chose nodes).
Live figures come from sacct (NodeList, AllocTRES, Start, End per run), saved by the
replay as <workdir>/<run>/allocations.json. Trace seconds throughout.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from dataclasses import replace
from pathlib import Path

from benchmarks.studies.fidelity_ctld import LOG
from slurm_ext.core.fragmentation import JobRuns, summarize
from slurm_ext.policy import PolicyConfig
from slurm_ext.replay.modes import ClusterSpec, ReplayOptions, replay_mode
from slurm_ext.replay.placement import load_allocations
from slurm_ext.replay.plan import plan
from slurm_ext.replay.run import Interrupted
from slurm_ext.replay.service import service_interval_s
from slurm_ext.replay.slurmconf import backfill_settings
from slurm_ext.sim.engine import SimConfig, Simulator
from slurm_ext.sim.simjob import SimJob
from slurm_ext.sim.traces import TraceJob, read_trace

RUNS = {  # label -> (replay mode, hints on)
    "slurm": ("slurm", False),
    "service": ("service", False),
    "service-hints": ("service", True),
}


class Recorded(Simulator):
    """A simulation that keeps every run's nodes, for `fragmentation.summarize`."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.record: dict[int, JobRuns] = {}

    def _start(self, job: SimJob, alloc: list[tuple[str, int]], now: float) -> None:
        super()._start(job, alloc, now)
        rec = self.record.setdefault(job.id, JobRuns(job.id, job.gpus, job.submit))
        rec.runs.append((now, now, tuple(alloc)))

    def _stop(self, job: SimJob, now: float, release: bool = True) -> None:
        rec = self.record[job.id]
        s, _, alloc = rec.runs[-1]
        rec.runs[-1] = (s, now, alloc)
        super()._stop(job, now, release)


def best_fit_share(jobs: list[JobRuns], nodes: dict[str, int]) -> float:
    """Share of single-node starts that went to a GPU best fit: a node with the fewest
    free GPUs among those that fit the job (what `choose_gpus` and the hints pick)."""
    ev = sorted(
        (t, order, n, j.gpus, alloc)
        for n, j in enumerate(jobs)
        for s, e, alloc in j.runs
        for t, order in ((s, 1), (e, 0))
    )
    free = dict(nodes)
    starts = best = 0
    for _, order, _, gpus, alloc in ev:
        if order == 1 and len(alloc) == 1:
            fits = [f for f in free.values() if f >= gpus]
            starts += 1
            best += bool(fits) and free[alloc[0][0]] == min(fits)
        for node, g in alloc:
            free[node] += g if order == 0 else -g
    return best / starts if starts else 0.0


def hint_writes(log: Path) -> dict[str, int]:
    """What slurmctld's log says of the service's ReqNodeList writes: set on a waiting job
    (`setting req_nodes`), or arrived after Slurm had started it, where Slurm reads the
    field as a resize of the running job (`setting nodes to`: accepted, the node list
    shrunk to the hint's nodes; `Invalid node list`: refused, not a subset)."""
    text = log.read_text(errors="replace") if log.is_file() else ""
    return {
        "hinted": text.count("setting req_nodes to"),
        "resized": text.count("setting nodes to"),
        "refused": text.count("Invalid node list"),
    }


def sim_inputs(
    trace: list[TraceJob], args: argparse.Namespace, mode: str
) -> tuple[list[TraceJob], SimConfig]:
    """The trace and cluster that match the live replay in trace seconds: limits as Slurm
    enforced them (whole wall minutes), the replay's job names and user (what the
    conditioned index groups by live), its backfill cycles and the service's pass period."""
    planned = plan(trace, args.speedup, args.nodes, args.gpus_per_node, mode, 0.0, args.seed)
    user = getpass.getuser()
    jobs = [
        replace(
            p.trace, time_limit_s=p.limit_min * 60.0 * args.speedup, user=user, job_name=p.kind_name
        )
        for p in planned
    ]
    bf = backfill_settings(args.speedup, max(p.limit_min for p in planned))
    cluster = SimConfig(
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        preemptive=False,
        placement=args.hints,
        scheduler="slurm",
        bf_interval_s=bf.interval_s * args.speedup,
        bf_resolution_s=bf.resolution_s * args.speedup,
        bf_window_s=bf.window_min * 60.0 * args.speedup,
        pass_interval_s=service_interval_s(args.speedup) * args.speedup if mode != "slurm" else 0,
        seed=args.seed,
    )
    return jobs, cluster


def simulated(trace: list[TraceJob], args: argparse.Namespace, mode: str) -> dict[str, float]:
    jobs, cluster = sim_inputs(trace, args, mode)
    policy = PolicyConfig(policy="fifo") if mode == "slurm" else PolicyConfig()
    sim = Recorded(jobs, policy, cluster)
    sim.run()
    nodes = dict.fromkeys(sim.cluster.idx.free, args.gpus_per_node)
    jobs = list(sim.record.values())
    return {**summarize(jobs, nodes, args.gpus_per_node), "best_fit": best_fit_share(jobs, nodes)}


def live_figures(path: Path, args: argparse.Namespace) -> dict[str, float]:
    """From a replay's allocations.json; nodes no job ran on count as wholly free."""
    jobs = load_allocations(path)
    nodes = {n: args.gpus_per_node for j in jobs.values() for _, _, a in j.runs for n, _ in a}
    for k in range(args.nodes - len(nodes)):
        nodes[f"unused{k}"] = args.gpus_per_node
    runs = list(jobs.values())
    return {
        **summarize(runs, nodes, args.gpus_per_node, args.speedup),
        "best_fit": best_fit_share(runs, nodes),
    }


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--trace", required=True, help="Tiresias CSV (slurm-ext trace synth)")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--speedup", type=float, required=True)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--hints", default="consolidate", help="the hints' placement mode")
    ap.add_argument("--workdir", default=None, help="run the live replays here")
    ap.add_argument("--live-from", default=None, help="read DIR/<run>/allocations.json")
    args = ap.parse_args()
    if bool(args.workdir) == bool(args.live_from):
        ap.error("give exactly one of --workdir (run live) and --live-from (read)")
    trace = read_trace(args.trace, "tiresias").jobs
    root = Path(args.workdir or args.live_from)
    rows: list[tuple[str, str, dict[str, float]]] = []
    for label, (mode, hints) in RUNS.items():
        if args.workdir:
            try:
                options = ReplayOptions(
                    args.speedup, 1800.0, 0.0, args.seed, placement=args.hints if hints else None
                )
                replay_mode(
                    trace, mode, root / label, options, ClusterSpec(args.nodes, args.gpus_per_node)
                )
            except Interrupted:
                print("interrupted: the replay cancelled its jobs, stopped its daemons")
                return 130
        live = live_figures(root / label / "allocations.json", args)
        rows.append((label, "live", {**live, **hint_writes(root / label / LOG)}))
        if label != "service-hints":  # the simulator places as the hints do (see above)
            rows.append((label, "sim", simulated(trace, args, mode)))
    writes: list[str] = []
    base = {src: r["avg_jct_s"] for label, src, r in rows if label == "slurm"}
    print(f"# {args.trace}: {len(trace)} jobs, {args.nodes} x {args.gpus_per_node} GPUs, "
          f"speedup {args.speedup:g}, hints {args.hints}")  # fmt: skip
    print("| run | source | wait 4-GPU (h) | wait 8-GPU (h) | stranded % | free while waiting % "
          "| avg JCT (h) | vs Slurm alone | best-fit starts % |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for label, src, r in rows:
        if src == "live":
            writes.append(f"{label}: {r['hinted']} hints set on waiting jobs, "
                          f"{r['resized']} + {r['refused']} written after the job started "
                          "(resize accepted + refused)")  # fmt: skip
        ratio = r["avg_jct_s"] / base[src] if base.get(src) else float("nan")
        print(
            f"| {label} | {src} | {r['wait4_s'] / 3600:.2f} | {r['wait8_s'] / 3600:.2f} "
            f"| {100 * r['frag_share']:.2f} | {100 * r['idle_share']:.2f} "
            f"| {r['avg_jct_s'] / 3600:.2f} | {ratio:.3f} | {100 * r['best_fit']:.0f} |"
        )
    print("\nslurmctld's log of the service's ReqNodeList writes:")
    print("\n".join(writes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
