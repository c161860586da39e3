"""The shared replay's job: its work advances at the speed its GPU model gives it.

    python shared_payload.py WORK_S SPEED_FILE FREEZER_DIR

Joins a freezer cgroup named like Slurm's (FREEZER_DIR/uid_0/job_J/step_0, J from
SLURM_JOB_ID: the replay cluster runs proctrack/linuxproc, which makes none), so the node
agent finds it as a job and pauses it with the cgroup freezer, as on a site running
proctrack/cgroup; "" skips that. Then runs until WORK_S seconds of work are done, each
step of wall time counting `speed` seconds of work, `speed` read from SPEED_FILE (a
number; missing or unreadable: 1), which `replay.sharing.GpuModel` writes from the
interference model and the pauses. A frozen payload makes no progress; a step that
spans a freeze counts at most two steps, so thawing adds no work. Appends `start` and
`done` to SPEED_FILE + ".log". Standard library only (run with python -I).
"""

from __future__ import annotations

import os
import sys
import time

STEP_S = 0.2


def join_freezer(top: str) -> None:
    job = os.environ.get("SLURM_JOB_ID", "")
    if not top or not job.isdigit():
        return
    step = os.path.join(top, "uid_0", f"job_{job}", "step_0")
    os.makedirs(step, exist_ok=True)
    with open(os.path.join(step, "cgroup.procs"), "w") as fh:
        fh.write(str(os.getpid()))


def read_speed(path: str) -> float:
    try:
        with open(path) as fh:
            v = float(fh.read().strip())
    except (OSError, ValueError):
        return 1.0
    return v if 0.0 <= v <= 1.0 else 1.0


def log(path: str, line: str) -> None:
    with open(f"{path}.log", "a") as fh:
        fh.write(f"{time.time():.3f} {line}\n")


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: shared_payload.py WORK_S SPEED_FILE FREEZER_DIR", file=sys.stderr)
        return 2
    work, speed_file, top = float(argv[0]), argv[1], argv[2]
    join_freezer(top)
    log(speed_file, "start")
    done = 0.0
    t = time.monotonic()
    while done < work:
        speed = read_speed(speed_file)
        time.sleep(STEP_S)
        now = time.monotonic()
        done += min(now - t, 2 * STEP_S) * speed
        t = now
    log(speed_file, "done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
