"""Which Slurm job a process belongs to, and per-job CPU use (pausing a job: freezer.py).

Mapping trusts the cgroup first: slurmstepd places every task in
`.../slurm/uid_U/job_J/step_S/...` (cgroup v1) or `.../job_J/step_S/...` (v2), and a user
cannot move a process out of it. SLURM_JOB_ID in /proc/PID/environ is only a fallback
(for processes outside any job cgroup, e.g. a hand-started test process).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

_JOB_RE = re.compile(r"/job_(\d+)(?=/|$)")
_STEP_RE = re.compile(r"/job_\d+/step_([^/]+)")
_UID_RE = re.compile(r"/uid_(\d+)(?=/)")
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class CgroupPlacement:
    """A process's cgroups as /proc/PID/cgroup lists them."""

    v1: dict[str, str]  # controller -> path (named hierarchies as "name=systemd")
    v2: str | None  # the unified path, from the "0::" line
    job_id: int | None
    step: str | None
    uid: int | None


def parse_proc_cgroup(text: str) -> CgroupPlacement:
    """Parse /proc/PID/cgroup. The v2 line wins for the job id, then freezer, then any v1."""
    v1: dict[str, str] = {}
    v2: str | None = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hid, controllers, path = parts
        if hid == "0" and controllers == "":
            v2 = path
        else:
            for c in controllers.split(","):
                v1[c] = path
    candidates = [v2 or "", v1.get("freezer", "")] + sorted(v1.values())
    for path in candidates:
        m = _JOB_RE.search(path)
        if m:
            step = _STEP_RE.search(path)
            uid = _UID_RE.search(path)
            return CgroupPlacement(
                v1,
                v2,
                int(m.group(1)),
                step.group(1) if step else None,
                int(uid.group(1)) if uid else None,
            )
    return CgroupPlacement(v1, v2, None, None, None)


def job_dir(path: str) -> str | None:
    """The job-level directory of a Slurm cgroup path: '/a/job_7/step_0/x' -> '/a/job_7'."""
    m = _JOB_RE.search(path)
    return path[: m.end()] if m else None


def parse_environ(data: bytes) -> dict[str, str]:
    out = {}
    for item in data.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


@dataclass(frozen=True)
class CgroupMounts:
    v1: dict[str, str]  # controller -> mount point
    v2: str | None


def parse_mounts(text: str) -> CgroupMounts:
    """Find cgroup mount points in /proc/self/mounts (v1, v2 or hybrid)."""
    v1: dict[str, str] = {}
    v2 = None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        _, mnt, fstype, opts = parts[:4]
        if fstype == "cgroup2" and v2 is None:
            v2 = mnt
        elif fstype == "cgroup":
            for opt in opts.split(","):
                if opt in ("rw", "ro") or opt.startswith(("relatime", "nosuid", "nodev", "noexec")):
                    continue
                v1.setdefault(opt, mnt)
    return CgroupMounts(v1, v2)


def read_mounts(path: str = "/proc/self/mounts") -> CgroupMounts:
    try:
        return parse_mounts(Path(path).read_text())
    except OSError:
        return CgroupMounts({}, None)


def _read(path: str) -> bytes | None:
    """Whole file or None. Raw os.read: half the CPU of open().read() on /proc files,
    which the agent reads for every process at every sample."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


@dataclass(frozen=True)
class ProcStat:
    cpu_s: float  # user + system of the process (all threads)
    start_ticks: int  # boot-relative start time; tells a reused PID apart
    rss_bytes: int


def read_proc_stat(pid: int, proc_root: str = "/proc") -> ProcStat | None:
    raw = _read(f"{proc_root}/{pid}/stat")
    if raw is None:
        return None
    rest = raw[raw.rfind(b")") + 2 :].split()  # the comm field may hold spaces
    try:
        utime, stime, start, rss = int(rest[11]), int(rest[12]), int(rest[19]), int(rest[21])
    except (IndexError, ValueError):
        return None
    return ProcStat((utime + stime) / CLK_TCK, start, rss * PAGE)


def node_busy_cpu_s(proc_root: str = "/proc") -> float | None:
    """Busy CPU seconds of the whole node since boot (all CPUs, idle and iowait excluded)."""
    raw = _read(f"{proc_root}/stat")
    if raw is None:
        return None
    fields = raw.split(b"\n", 1)[0].split()[1:]
    vals = [int(v) for v in fields[:8]]
    busy = sum(vals) - vals[3] - (vals[4] if len(vals) > 4 else 0)
    return busy / CLK_TCK


@dataclass
class JobProcesses:
    """Processes of one job found by one scan."""

    job_id: int
    pids: list[int] = field(default_factory=list)
    cpu_s: float = 0.0  # summed CPU seconds of the live processes
    cpu_by_proc: dict[tuple[int, int], float] = field(default_factory=dict)  # (pid, start)
    rss_bytes: int = 0
    placement: CgroupPlacement | None = None  # of one process (the first found)
    from_environ: bool = False
    # mapped by SLURM_JOB_ID alone (the user's word): the agent keeps them only where
    # slurmctld says the job runs on this node under the process's user
    environ_pids: list[int] = field(default_factory=list)


def without_pids(jp: JobProcesses, drop: set[int], proc_root: str = "/proc") -> JobProcesses:
    """The job's processes less `drop` (the agent's filter of unvouched processes)."""
    keep = [p for p in jp.pids if p not in drop]
    cpu = {k: v for k, v in jp.cpu_by_proc.items() if k[0] not in drop}
    rss = sum(st.rss_bytes for p in keep if (st := read_proc_stat(p, proc_root)) is not None)
    env = [p for p in jp.environ_pids if p not in drop]
    return JobProcesses(jp.job_id, keep, sum(cpu.values()), cpu, rss, jp.placement, bool(env), env)


# A process younger than this may still be moved into a job cgroup (slurmstepd attaches
# a task after fork; pam_slurm_adopt moves an ssh session in), so "in no job" is
# re-checked until it is this old. A job process never leaves its job's cgroup.
YOUNG_S = 60.0


def uptime_ticks(proc_root: str = "/proc") -> int | None:
    """Clock ticks since boot, on the scale of /proc/PID/stat's start time."""
    raw = _read(f"{proc_root}/uptime")
    try:
        return int(float(raw.split()[0]) * CLK_TCK) if raw else None
    except (IndexError, ValueError):
        return None


class JobScanner:
    """Maps processes to jobs, sample after sample, reading a process's /proc/PID/cgroup
    only the first time it is seen.

    The mapping is cached per (pid, start time): a reused PID has another start time and
    is mapped afresh; entries of exited processes are dropped at each scan. /proc/PID/stat
    is still read every scan (CPU time, RSS, and the start time that validates the entry).
    """

    def __init__(self, proc_root: str = "/proc") -> None:
        self.proc_root = proc_root
        # pid -> (start ticks, placement; None = in no job cgroup)
        self.known: dict[int, tuple[int, CgroupPlacement | None]] = {}
        self._parsed: dict[bytes, CgroupPlacement] = {}  # one step's processes share one text
        self.cgroup_reads = 0  # /proc/PID/cgroup files read so far (tests, benchmark)

    def scan(self, extra_pids: Iterable[int] = ()) -> dict[int, JobProcesses]:
        """Map every process in a Slurm job cgroup to its job; `extra_pids` (GPU processes)
        not in any job cgroup are mapped by SLURM_JOB_ID from their environment instead."""
        jobs: dict[int, JobProcesses] = {}
        unmapped = set(extra_pids)
        try:
            entries = os.listdir(self.proc_root)
        except OSError:
            return jobs
        now = uptime_ticks(self.proc_root)
        young_ticks = YOUNG_S * CLK_TCK
        alive: set[int] = set()
        for name in entries:
            if not name.isdigit():
                continue
            pid = int(name)
            st = read_proc_stat(pid, self.proc_root)
            if st is None:
                continue  # exited (or not readable)
            alive.add(pid)
            known = self.known.get(pid)
            if (
                known is not None
                and known[0] == st.start_ticks
                and (
                    known[1] is not None
                    or (now is not None and now - st.start_ticks >= young_ticks)
                )
            ):
                placement = known[1]
            else:
                placement = self._placement(pid)
                self.known[pid] = (st.start_ticks, placement)
            if placement is None or placement.job_id is None:
                continue
            _add(jobs, placement.job_id, pid, st, placement, False)
            unmapped.discard(pid)
        for pid in [p for p in self.known if p not in alive]:
            del self.known[pid]
        for pid in unmapped:
            env = _read(f"{self.proc_root}/{pid}/environ")
            job = parse_environ(env).get("SLURM_JOB_ID", "") if env else ""
            st = read_proc_stat(pid, self.proc_root) if job.isdigit() else None
            if st is not None:
                _add(jobs, int(job), pid, st, None, True)
        return jobs

    def _placement(self, pid: int) -> CgroupPlacement | None:
        """The job placement from /proc/PID/cgroup, or None when in no job cgroup."""
        self.cgroup_reads += 1
        raw = _read(f"{self.proc_root}/{pid}/cgroup")
        if raw is None or b"job_" not in raw:
            return None
        placement = self._parsed.get(raw)
        if placement is None:
            if len(self._parsed) > 4096:
                self._parsed.clear()
            placement = self._parsed[raw] = parse_proc_cgroup(raw.decode(errors="replace"))
        return placement if placement.job_id is not None else None


def scan_jobs(proc_root: str = "/proc", extra_pids: Iterable[int] = ()) -> dict[int, JobProcesses]:
    """One scan without a cache (see JobScanner for repeated scans)."""
    return JobScanner(proc_root).scan(extra_pids)


def _add(
    jobs: dict[int, JobProcesses],
    job_id: int,
    pid: int,
    st: ProcStat,
    placement: CgroupPlacement | None,
    from_environ: bool,
) -> None:
    jp = jobs.setdefault(job_id, JobProcesses(job_id, placement=placement))
    jp.from_environ = jp.from_environ or from_environ
    jp.pids.append(pid)
    if from_environ:
        jp.environ_pids.append(pid)
    jp.cpu_s += st.cpu_s
    jp.cpu_by_proc[(pid, st.start_ticks)] = st.cpu_s
    jp.rss_bytes += st.rss_bytes


def job_env_process(
    pids: Iterable[int], proc_root: str = "/proc", key: str = "SLURM_JOB_ID"
) -> tuple[int, dict[str, str]] | None:
    """(pid, environment) of the earliest-started of `pids` whose exec-time environment
    has `key`, or None."""
    best: tuple[tuple[int, int], dict[str, str]] | None = None
    for pid in pids:
        st = read_proc_stat(pid, proc_root)
        env_raw = _read(f"{proc_root}/{pid}/environ")
        if st is None or not env_raw or (key.encode() + b"=") not in env_raw:
            continue
        env = parse_environ(env_raw)
        if key not in env:
            continue
        if best is None or (st.start_ticks, pid) < best[0]:
            best = ((st.start_ticks, pid), env)
    return (best[0][1], best[1]) if best else None


def job_slurm_env(pids: Iterable[int], proc_root: str = "/proc") -> dict[str, str]:
    """SLURM_* variables of the job's earliest-started process that has them.

    slurmstepd sets SLURM_JOB_QOS / SLURM_JOB_PARTITION when it execs the task; a user can
    start children with a changed environment but cannot change the exec-time environment
    of the first task, so the earliest process is the one trusted."""
    found = job_env_process(pids, proc_root)
    return {k: v for k, v in found[1].items() if k.startswith("SLURM_")} if found else {}


def proc_uid(pid: int, proc_root: str = "/proc") -> int | None:
    """The real UID of a process, from /proc/PID/status."""
    raw = _read(f"{proc_root}/{pid}/status")
    for line in (raw or b"").splitlines():
        if line.startswith(b"Uid:"):
            try:
                return int(line.split()[1])
            except (IndexError, ValueError):
                return None
    return None


def cpuset_size(spec: str) -> int:
    """Count CPUs in a cpuset list such as '0-3,8,10-11'."""
    n = 0
    for part in spec.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        n += int(hi) - int(lo) + 1 if hi else 1
    return n


def job_cpus_alloc(placement: CgroupPlacement | None, mounts: CgroupMounts) -> int | None:
    """CPUs in the job's cpuset, when the job cgroup has one we can read."""
    if placement is None:
        return None
    candidates = []
    if placement.v2 and mounts.v2 and job_dir(placement.v2):
        candidates.append(f"{mounts.v2}{job_dir(placement.v2)}/cpuset.cpus.effective")
    if "cpuset" in placement.v1 and "cpuset" in mounts.v1 and job_dir(placement.v1["cpuset"]):
        candidates.append(f"{mounts.v1['cpuset']}{job_dir(placement.v1['cpuset'])}/cpuset.cpus")
    for path in candidates:
        raw = _read(path)
        if raw and raw.strip():
            try:
                return cpuset_size(raw.decode())
            except ValueError:
                continue
    return None
