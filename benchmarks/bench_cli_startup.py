"""`slurm-ext` start-up: CPU time of `slurm-ext --help` and `slurm-ext queue --help`
(import of the command modules and click's parsing), this tree against a git ref.

The ref's slurm_ext/, nodeagent/ and the etc/ and sbatch_templates/ that slurm_ext links
to are extracted with `git archive` into a temporary directory and put first on
PYTHONPATH; runs alternate between the two trees, so a change
in the machine's load hits both alike. CPU time (user + sys of the child, from
getrusage) rather than wall time, which the shared machine's load would dominate.

    .venv/bin/python -m benchmarks.bench_cli_startup [--ref main] [--runs 21]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = (["--help"], ["queue", "--help"])
# slurm_ext/etc and slurm_ext/sbatch_templates are links to the last two: the CLI reads them
TREES = ("slurm_ext", "nodeagent", "etc", "sbatch_templates")


def cpu_s(tree: Path, args: list[str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [sys.executable, "-m", "slurm_ext.cli", *args],
        env={**os.environ, "PYTHONPATH": str(tree)},
        cwd=tempfile.gettempdir(),  # not the checkout: PYTHONPATH alone picks the tree
        capture_output=True,
        check=True,
        timeout=60,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", default="main", help="git ref to compare with")
    ap.add_argument("--runs", type=int, default=21)
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", opts.ref, *TREES],
            capture_output=True,
            check=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        for args in COMMANDS:
            ref, here = [], []
            for _ in range(opts.runs):
                ref.append(cpu_s(Path(tmp), args))
                here.append(cpu_s(ROOT, args))
            a, b = statistics.median(ref), statistics.median(here)
            print(
                f"slurm-ext {' '.join(args)}: CPU median of {opts.runs}: {opts.ref} "
                f"{a * 1000:.0f} ms, this tree {b * 1000:.0f} ms, ratio {b / a:.2f}"
            )


if __name__ == "__main__":
    main()
