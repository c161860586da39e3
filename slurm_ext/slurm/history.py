"""Completed-job history from Slurm accounting (sacct), for the Gittins distribution.

Where slurmdbd exists, its history is far longer than what the service has seen itself;
the service seeds and refreshes its store from it. Parsing is the simulator's sacct
reader, so a site's history means the same thing to the simulator and the service.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time

from slurm_ext.sim.traces import read_trace
from slurm_ext.slurm.client import SlurmError, SlurmUnavailable

SACCT_FIELDS = "JobIDRaw,Submit,Start,End,AllocTRES,User,Partition,JobName,Account,Timelimit"


def sacct_completions(
    days: float,
    slurm_conf: str | None = None,
    timeout: float = 120.0,
    bin_dir: str | None = None,
    now: float | None = None,
) -> list[tuple[int, float, float, float, str, str, str, float | None]]:
    """(job_id, gpu_s, run_s, approximate end time, user, job name, account, time limit)
    of GPU jobs that ended in the last `days`: the kind is what the conditioned Gittins
    index groups by (policy/kinds.py).

    Raises SlurmError with sacct's message when accounting is not available.
    """
    now = time.time() if now is None else now
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now - days * 86400))
    argv = [
        os.path.join(bin_dir, "sacct") if bin_dir else "sacct",
        "--allusers", "--allocations", "--parsable2", "--noconvert",
        f"--format={SACCT_FIELDS}", f"--starttime={since}", "--state=CD,F,TO,CA,OOM,NF",
    ]  # fmt: skip
    env = dict(os.environ)
    if slurm_conf:
        env["SLURM_CONF"] = slurm_conf
    cmd = " ".join(["sacct", *argv[1:]])
    try:
        res = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise SlurmUnavailable(cmd, f"no answer within {timeout:.0f}s") from exc
    except FileNotFoundError as exc:
        raise SlurmError(cmd, "sacct not found on PATH (install slurm-client)") from exc
    if res.returncode != 0:
        raise SlurmError(
            cmd, (res.stderr.strip() or res.stdout.strip() or f"exit {res.returncode}")[:2000]
        )
    with tempfile.NamedTemporaryFile("w", suffix=".sacct", delete=False) as fh:
        fh.write(res.stdout)
        path = fh.name
    try:
        trace = read_trace(path, "sacct", skip_bad=True, shift=False)
    finally:
        os.unlink(path)
    # the reader keeps submit time and run length; end = submit + run underestimates the
    # queue wait, which only shifts the order in which old samples leave the window
    return [
        (
            j.job_id,
            j.gpus * j.duration_s,
            j.duration_s,
            j.submit_time + j.duration_s,
            j.user,
            j.job_name,
            j.account,
            j.time_limit_s,
        )
        for j in trace.jobs
    ]
