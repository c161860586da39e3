"""Pausing and resuming a whole job (co-location's lever), and the record that lets an
agent restarted mid-pause undo it.

cgroup v2 `cgroup.freeze` first, then the v1 freezer, then SIGSTOP/SIGCONT of the job's
processes, each remembered by what it froze, so a resume never signals a PID that now
belongs to someone else.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nodeagent.cgroups import CgroupMounts, JobProcesses, job_dir, read_proc_stat

log = logging.getLogger(__name__)


@dataclass
class PauseRecord:
    """How a job was paused, enough to undo it after an agent restart."""

    job_id: int
    method: str  # "cgroup-v2", "cgroup-v1" or "sigstop"
    targets: list[str]  # freeze files, or "pid:start_ticks" for SIGSTOP

    def to_dict(self) -> dict:
        return {"job_id": self.job_id, "method": self.method, "targets": list(self.targets)}

    @classmethod
    def from_dict(cls, d: dict) -> PauseRecord:
        method = str(d["method"])
        if method not in ("cgroup-v2", "cgroup-v1", "sigstop"):
            raise ValueError(f"unknown pause method {method!r}")
        return cls(int(d["job_id"]), method, [str(t) for t in d["targets"]])


class JobFreezer:
    """Pause and resume a whole job: cgroup v2 `cgroup.freeze`, else the v1 freezer,
    else SIGSTOP/SIGCONT of the job's processes.

    On v2 the `user` subtree of each step is frozen where Slurm made one, so slurmstepd
    (in `step_S/slurm`) keeps answering slurmd; otherwise the job directory is frozen.
    """

    def __init__(self, mounts: CgroupMounts, proc_root: str = "/proc") -> None:
        self.mounts = mounts
        self.proc_root = proc_root

    def pause(
        self, job: JobProcesses, before: Callable[[PauseRecord], None] | None = None
    ) -> PauseRecord:
        """Freeze the job by the first method that works. `before(record)` is called
        with what is about to be frozen before anything is (the agent saves it, so a
        crash right after the freeze still leaves a record to thaw from)."""
        record = before or (lambda rec: None)
        targets = self._v2_targets(job)
        if targets:
            rec = PauseRecord(job.job_id, "cgroup-v2", targets)
            record(rec)
            if all(_write(t, "1") for t in targets):
                return rec
        target = self._v1_target(job)
        if target:
            rec = PauseRecord(job.job_id, "cgroup-v1", [target])
            record(rec)
            if _write(target, "FROZEN"):
                return rec
        planned = []
        for pid in job.pids:
            st = read_proc_stat(pid, self.proc_root)
            if st is not None:
                planned.append((pid, f"{pid}:{st.start_ticks}"))
        record(PauseRecord(job.job_id, "sigstop", [t for _, t in planned]))
        targets = []
        for pid, target in planned:
            try:
                os.kill(pid, signal.SIGSTOP)
            except OSError as exc:
                log.warning("SIGSTOP job %s pid %s failed: %s", job.job_id, pid, exc)
                continue
            targets.append(target)
        return PauseRecord(job.job_id, "sigstop", targets)

    def frozen(self, job: JobProcesses) -> PauseRecord | None:
        """What of the job's cgroups is frozen where `pause` freezes (v2 `cgroup.freeze`
        1, v1 `freezer.state` FROZEN or FREEZING), as the record that undoes it; None when
        nothing is. A SIGSTOP pause leaves no such mark and is not found."""
        v2 = [t for t in self._v2_targets(job, every=True) if _read(t) == "1"]
        if v2:
            return PauseRecord(job.job_id, "cgroup-v2", v2)
        v1 = self._v1_target(job)
        if v1 and _read(v1) in ("FROZEN", "FREEZING"):
            return PauseRecord(job.job_id, "cgroup-v1", [v1])
        return None

    def _v2_targets(self, job: JobProcesses, every: bool = False) -> list[str]:
        """The v2 freeze files `pause` writes: each step's `user` subtree where Slurm made
        one, else the job directory. `every`: the job directory's as well."""
        p = job.placement
        d = job_dir(p.v2) if p is not None and p.v2 and self.mounts.v2 else None
        if not d:
            return []
        base = Path(f"{self.mounts.v2}{d}")
        if not (base / "cgroup.freeze").exists():
            return []
        users = [str(t) for t in sorted(base.glob("step_*/user/cgroup.freeze"))]
        job_level = [str(base / "cgroup.freeze")]
        return users + job_level if every else users or job_level

    def _v1_target(self, job: JobProcesses) -> str:
        """The v1 `freezer.state` of the job directory, or "" without a v1 freezer."""
        p = job.placement
        if p is None or "freezer" not in p.v1 or "freezer" not in self.mounts.v1:
            return ""
        d = job_dir(p.v1["freezer"])
        return f"{self.mounts.v1['freezer']}{d}/freezer.state" if d else ""

    def resume(self, rec: PauseRecord) -> bool:
        """Undo a pause; True when every target was resumed (or is gone)."""
        ok = True
        for t in rec.targets:
            if rec.method == "cgroup-v2":
                ok &= _write(t, "0") or not os.path.exists(t)
            elif rec.method == "cgroup-v1":
                ok &= _write(t, "THAWED") or not os.path.exists(t)
            else:
                pid_s, _, start_s = t.partition(":")
                st = read_proc_stat(int(pid_s), self.proc_root)
                if st is None or str(st.start_ticks) != start_s:
                    continue  # exited, or the PID now belongs to someone else
                try:
                    os.kill(int(pid_s), signal.SIGCONT)
                except OSError as exc:
                    log.warning("SIGCONT job %s pid %s failed: %s", rec.job_id, pid_s, exc)
                    ok = False
        return ok


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _write(path: str, value: str) -> bool:
    try:
        with open(path, "w") as f:
            f.write(value)
        return True
    except OSError as exc:
        log.debug("cannot write %r to %s: %s", value, path, exc)
        return False
