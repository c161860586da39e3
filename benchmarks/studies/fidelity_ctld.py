"""A replay's timings from its own logs (used by fidelity.py): the service's pass
period from its log, and submits, starts and ends to the millisecond from slurmctld's.

sacct's records carry whole seconds: at speedup 1,500 each stamp is known to 1,500 trace s,
and a run's held time (end stamp - start stamp) is off by the two stamps' fractions. Those
fractions are not uniform: backfill starts jobs at one phase of its 1 s timer, so on
synth2 the held time less the work measured -0.15 s a job on average in one mode and
+0.36 s in the other, with a spread of 0.35 s, while the same runs' slurmctld log (a
millisecond timestamp on each submit, start and completion) gives 0.13-0.16 s in both,
spread 0.04 s. The local harness keeps that log as <mode dir>/cluster/log/slurmctld.log;
runs without it fall back to sacct's stamps (fidelity_jobs.launch_extras).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from slurm_ext.sim.traces import TraceJob

LOG = Path("cluster") / "log" / "slurmctld.log"
# Slurm 22.05's lines (the replay's release): a submit, a start by the main scheduler or
# by backfill, a completion
EVENT = re.compile(
    r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})\] (?:"
    r"_slurm_rpc_submit_batch_job: JobId=(?P<submit>\d+) "
    r"|sched: Allocate JobId=(?P<alloc>\d+) "
    r"|sched/backfill: _start_job: Started JobId=(?P<bf>\d+) "
    r"|_job_complete: JobId=(?P<done>\d+) done$)"
)


@dataclass
class CtldTimes:
    """Per Slurm job id: its submit, and each run's start and end (epoch s, ms)."""

    submit: dict[int, float] = field(default_factory=dict)
    starts: dict[int, list[float]] = field(default_factory=dict)
    ends: dict[int, list[float]] = field(default_factory=dict)


def ctld_times(log: Path) -> CtldTimes | None:
    """The log's submits, starts and completions; None when there is no log."""
    if not log.exists():
        return None
    out = CtldTimes()
    with log.open(errors="replace") as fh:
        for line in fh:
            m = EVENT.match(line)
            if m is None:
                continue
            t = datetime.fromisoformat(m.group(1)).timestamp()
            if m["submit"]:
                out.submit[int(m["submit"])] = t
            elif m["alloc"] or m["bf"]:
                out.starts.setdefault(int(m["alloc"] or m["bf"]), []).append(t)
            else:
                out.ends.setdefault(int(m["done"]), []).append(t)
    return out


def _records(mode_dir: Path) -> dict[str, dict]:
    return json.loads((mode_dir / "records.json").read_text())


def launch_extras(
    mode_dirs: Sequence[Path], trace: Sequence[TraceJob], speedup: float
) -> list[float] | None:
    """Held minus work per job (wall s) from slurmctld's log: jobs that ran once and
    completed, over the given modes' replays. None when any of them lacks its log
    (the caller falls back to sacct's stamps)."""
    work = {t.job_id: t.duration_s / speedup for t in trace}
    out: list[float] = []
    for d in mode_dirs:
        times = ctld_times(d / LOG)
        if times is None or not (d / "records.json").exists():
            return None
        for k, r in _records(d).items():
            sid = r["slurm_id"]
            starts, ends = times.starts.get(sid, []), times.ends.get(sid, [])
            if r["state"] == "COMPLETED" and r["requeues"] == 0 and len(starts) == 1 and ends:
                out.append(ends[-1] - starts[0] - work[int(k)])
    return out


def submit_lags(mode_dir: Path, trace: Sequence[TraceJob], speedup: float) -> list[float]:
    """How late each submit reached slurmctld after its schedule, beyond the least late
    (wall s; the replay's start epoch is not kept, so lags are relative). Empty without
    the log."""
    times = ctld_times(mode_dir / LOG)
    if times is None or not (mode_dir / "records.json").exists():
        return []
    when = {t.job_id: t.submit_time / speedup for t in trace}
    off = [
        times.submit[r["slurm_id"]] - when[int(k)]
        for k, r in _records(mode_dir).items()
        if r["slurm_id"] in times.submit and int(k) in when
    ]
    least = min(off, default=0.0)
    return [o - least for o in off]


def pass_period_s(log: Path) -> float | None:
    """The live service's mean time between passes (wall s) from its log: its interval
    plus each pass's own time, which the simulator's pass interval must match."""
    if not log.exists():
        return None
    stamps = [
        datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        for line in log.read_text().splitlines()
        if " pass: " in line
    ]
    if len(stamps) < 2:
        return None
    return (stamps[-1] - stamps[0]) / (len(stamps) - 1)
