"""Real processes in real cgroups laid out like Slurm's, for tests and the benchmark.

Everything created here is removed again, and only processes started here are signalled
(by PID).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from nodeagent.cgroups import read_proc_stat

BUSY = "import time\nwhile True:\n    pass\n"
SLEEP = "import time\ntime.sleep(3600)\n"


class SlurmLikeCgroups:
    """Job cgroups named like Slurm's under a private top directory:
    v1: <freezer mount>/<top>/uid_0/job_J/step_0 ; v2: <v2 mount>/<top>/job_J/step_0/user.
    """

    def __init__(self, version: int, mount: str, top: str | None = None) -> None:
        self.version = version
        self.mount = Path(mount)
        self.top = top or f"slurm_test_{os.getpid()}_{time.monotonic_ns() % 10**9}"
        self.procs: list[subprocess.Popen] = []
        self.dirs: list[Path] = []

    def step_dir(self, job_id: int) -> Path:
        if self.version == 1:
            return self.mount / self.top / "uid_0" / f"job_{job_id}" / "step_0"
        return self.mount / self.top / f"job_{job_id}" / "step_0" / "user"

    def start(
        self,
        job_id: int,
        code: str = SLEEP,
        env: dict[str, str] | None = None,
        argv: list[str] | None = None,
    ) -> int:
        """Start a child (Python running `code`, or `argv`) in job `job_id`'s step cgroup."""
        d = self.step_dir(job_id)
        if not d.exists():
            d.mkdir(parents=True)  # raises loudly when cgroups cannot be created
            self.dirs.append(d)
        full_env = dict(os.environ)
        full_env.update({"SLURM_JOB_ID": str(job_id)})
        full_env.update(env or {})
        p = subprocess.Popen(argv or [sys.executable, "-c", code], env=full_env)
        self.procs.append(p)
        (d / "cgroup.procs").write_text(str(p.pid))
        _wait_exec(p.pid, f"SLURM_JOB_ID={job_id}")
        return p.pid

    def close(self) -> None:
        for d in self.dirs:  # thaw first: a frozen process cannot die
            if self.version == 1:
                _try_write(d.parent / "freezer.state", "THAWED")
            else:
                _try_write(d.parent.parent / "cgroup.freeze", "0")
                _try_write(d / "cgroup.freeze", "0")
        for p in self.procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
            p.wait(timeout=10)
        top = self.mount / self.top
        for d in sorted(top.rglob("*"), key=lambda x: -len(x.parts)) if top.exists() else []:
            if d.is_dir():
                _rmdir(d)
        if top.exists():
            _rmdir(top)


def _try_write(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError:
        pass


def _rmdir(d: Path) -> None:
    for _ in range(50):  # a just-killed process may still be leaving the cgroup
        try:
            d.rmdir()
            return
        except OSError:
            time.sleep(0.02)


def cpu_s(pid: int) -> float:
    st = read_proc_stat(pid)
    return st.cpu_s if st else 0.0


def cpu_used_during(pids: list[int], seconds: float) -> float:
    before = sum(cpu_s(p) for p in pids)
    time.sleep(seconds)
    return sum(cpu_s(p) for p in pids) - before


def runs(pids: list[int]) -> bool:
    """Busy processes got CPU within a second: tolerant of a loaded 2-core machine, where a
    0.3 s window can give them under 0.1 s; a frozen process gets exactly 0."""
    return cpu_used_during(pids, 1.0) > 0.02


def _wait_exec(pid: int, marker: str, timeout: float = 5.0) -> None:
    """Until the child has exec'd, /proc/PID/environ is still the parent's: a reader then
    would see no job environment. Wait until it shows the job's."""
    needle = marker.encode() + b"\0"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if needle in Path(f"/proc/{pid}/environ").read_bytes():
                return
        except OSError:
            return  # exited or not readable: nothing to wait for
        time.sleep(0.005)
    raise RuntimeError(f"process {pid} did not exec within {timeout}s")
