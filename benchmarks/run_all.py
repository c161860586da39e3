"""Run every benchmark in this folder with its defaults (`make bench`), one after another.

Each prints its own table; figures to keep go into docs/benchmarks.md with the command
that produced them. A failing benchmark is reported and the others still run.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    failed = []
    for script in sorted(HERE.glob("bench_*.py")):
        print(f"\n=== {script.name}", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.run([sys.executable, str(script)], cwd=HERE.parent).returncode
        print(f"=== {script.name}: exit {rc}, {time.perf_counter() - t0:.0f} s", flush=True)
        if rc != 0:
            failed.append(script.name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
