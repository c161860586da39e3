"""Run every product benchmark in this folder (`make bench`), one after another.

    .venv/bin/python -m benchmarks.run_all                  # defaults: the figures' sizes
    .venv/bin/python -m benchmarks.run_all --quick          # smallest sizes: do they all run?
    .venv/bin/python -m benchmarks.run_all bench_sim bench_writes   # some of them

Each benchmark runs as `python -m benchmarks.<name>` from the repository root and prints
its own table; figures to keep go into docs/benchmarks.md with the command that produced
them. A failing benchmark is reported and the others still run. bench_agent and
bench_coloc_live must run as root; the live ones start their own local Slurm clusters
(slurm_ext/testing). The studies in benchmarks/studies/ are not run here (README there).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# the smallest options that still exercise each benchmark end to end (--quick)
QUICK: dict[str, list[str]] = {
    "bench_agent": [],
    "bench_cli_startup": ["--runs", "3"],
    "bench_coloc": ["--seeds", "1", "--jobs", "300"],
    "bench_coloc_live": ["--jobs", "20", "--fraction", "0.5", "--wall", "60"],
    "bench_coloc_speed": ["--jobs", "300"],
    "bench_hook": ["--jobs", "20", "--reps", "1", "--rows", "100"],
    "bench_predictor": ["--jobs", "200", "--seeds", "1", "--loads", "1.0"],
    "bench_report_listener": ["--seconds", "5"],
    "bench_service": ["--pending", "2000", "--running", "200", "--repeat", "1"],
    "bench_sim": ["--jobs", "300", "--seeds", "1", "--sizes", "2000"],
    "bench_sim_backlog": ["--jobs", "5000"],
    "bench_userview": ["--pending", "500", "--running", "100", "--rounds", "1", "--clients", "1"],
    "bench_writes": ["--jobs", "50", "--single", "20"],
}


def benchmarks() -> list[str]:
    """The product benchmarks: every bench_*.py in this folder."""
    return sorted(p.stem for p in HERE.glob("bench_*.py"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    ap.add_argument("--quick", action="store_true", help="each with its smallest options")
    args = ap.parse_args()
    known = benchmarks()
    unknown = sorted(set(args.names) - set(known))
    if unknown:
        ap.error(f"unknown benchmarks {', '.join(unknown)}; known: {', '.join(known)}")
    failed = []
    for name in args.names or known:
        argv = QUICK.get(name, []) if args.quick else []
        print(f"\n=== {name} {' '.join(argv)}", flush=True)
        t0 = time.perf_counter()
        cmd = [sys.executable, "-m", f"benchmarks.{name}", *argv]
        rc = subprocess.run(cmd, cwd=HERE.parent).returncode
        print(f"=== {name}: exit {rc}, {time.perf_counter() - t0:.0f} s", flush=True)
        if rc != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
