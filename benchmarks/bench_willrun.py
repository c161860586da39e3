"""How much cons_tres's will-run batches (`SimConfig.bf_willrun_window_s`) move the
simulator on issue 16's 2,000-job target traces (bench_targets.py's: recurring users,
64 GPUs as 8 x 8, load 1.1, the Slurm scheduler model, no preemption).

    .venv/bin/python benchmarks/bench_willrun.py                      # seeds 1-6, 0 vs 30 s
    .venv/bin/python benchmarks/bench_willrun.py --windows 0,30,300 --start batch

Per seed: avg JCT (h) of Slurm alone (fifo) and of the gittins defaults (np) at each
window, np / Slurm alone, the change against window 0, and the CPU seconds per run.
"""

from __future__ import annotations

import argparse
import time
from multiprocessing import Pool

from slurm_ext.policy import PolicyConfig
from slurm_ext.sim.engine import SimConfig, Simulator
from slurm_ext.sim.users import synth_user_jobs

RUNS = {"slurm": PolicyConfig(policy="fifo"), "np": PolicyConfig()}


def one(task: tuple[int, str, float, str, int]) -> tuple[tuple, float, float]:
    seed, label, window, start, jobs = task
    cl = SimConfig(
        nodes=8,
        gpus_per_node=8,
        preemptive=False,
        seed=seed,
        bf_willrun_window_s=window,
        bf_willrun_start=start,
    )
    trace = synth_user_jobs(jobs, 64, load=1.1, seed=seed)
    t0 = time.process_time()
    done = Simulator(trace, RUNS[label], cl).run()
    cpu = time.process_time() - t0
    return task, sum(j.finish - j.submit for j in done) / len(done) / 3600, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", default="1-6")
    ap.add_argument("--windows", default="0,30", help="will-run windows, trace s (0: off)")
    ap.add_argument("--start", default="nodes", choices=("nodes", "batch"))
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--procs", type=int, default=2)
    args = ap.parse_args()
    lo, _, hi = args.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)
    windows = [float(w) for w in args.windows.split(",")]
    tasks = [(s, lab, w, args.start, args.jobs) for s in seeds for lab in RUNS for w in windows]
    with Pool(args.procs) as pool:
        res = {task: (jct, cpu) for task, jct, cpu in pool.map(one, tasks)}
    print(f"# {args.jobs} jobs, 64 GPUs, load 1.1, start rule {args.start}; avg JCT h")
    print("seed  window  slurm_h    np_h  np/slurm  slurm_vs_w0  np_vs_w0  cpu_s")
    ratios: dict[float, list[float]] = {w: [] for w in windows}
    moves: dict[float, list[float]] = {w: [] for w in windows}
    for s in seeds:
        base = {lab: res[(s, lab, windows[0], args.start, args.jobs)][0] for lab in RUNS}
        for w in windows:
            got = {lab: res[(s, lab, w, args.start, args.jobs)] for lab in RUNS}
            sl, npj = got["slurm"][0], got["np"][0]
            ratios[w].append(npj / sl)
            moves[w] += [sl / base["slurm"] - 1, npj / base["np"] - 1]
            cpu = got["slurm"][1] + got["np"][1]
            print(
                f"{s:4d}  {w:6g}  {sl:7.3f}  {npj:6.3f}  {npj / sl:8.3f}  "
                f"{sl / base['slurm']:11.3f}  {npj / base['np']:8.3f}  {cpu:5.1f}"
            )
    for w in windows:
        r, m = ratios[w], moves[w]
        print(
            f"window {w:g}: np/slurm mean {sum(r) / len(r):.3f} worst {max(r):.3f}; "
            f"largest move of a run vs window {windows[0]:g}: {max(map(abs, m)):.1%}"
        )


if __name__ == "__main__":
    main()
