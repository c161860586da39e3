"""The replay's job: holds its GPUs for its (scaled) work, checkpointing, resumable.

    python payload.py WORK_S CHECKPOINT_S STATE_FILE

Runs until WORK_S seconds of work are done, in steps, writing the work done so far to
STATE_FILE (JSON, atomically) every CHECKPOINT_S seconds of work. Started again after a
requeue, it resumes from the last checkpoint: the work since then is lost, as a real
training job loses the steps after its last checkpoint. Each start appends a line to
STATE_FILE + ".log" (`start <work done>`, and `done` at the end) so the replay and its
tests can see resumes. Slurm kills it at its time limit. Standard library only.
"""

from __future__ import annotations

import json
import os
import sys
import time


def read_progress(path: str) -> float:
    try:
        with open(path) as fh:
            return float(json.load(fh)["progress_s"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0.0


def write_progress(path: str, progress: float) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        json.dump({"progress_s": progress, "job_id": os.environ.get("SLURM_JOB_ID", "")}, fh)
    os.replace(tmp, path)


def log(path: str, line: str) -> None:
    with open(f"{path}.log", "a") as fh:
        fh.write(f"{time.time():.3f} {line}\n")


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: payload.py WORK_S CHECKPOINT_S STATE_FILE", file=sys.stderr)
        return 2
    work, interval, state = float(argv[0]), float(argv[1]), argv[2]
    done = read_progress(state)
    log(state, f"start {done:.3f}")
    last_ckpt = done
    t = time.monotonic()
    while done < work:
        step = min(work - done, last_ckpt + interval - done) if interval > 0 else work - done
        time.sleep(max(step, 0.0))
        now = time.monotonic()
        done += now - t
        t = now
        if interval > 0 and done - last_ckpt >= interval - 1e-6 and done < work:
            write_progress(state, done)
            last_ckpt = done
    write_progress(state, work)
    log(state, "done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
