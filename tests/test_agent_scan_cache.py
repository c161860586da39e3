"""The job scanner's cache: a process is mapped once per (pid, start time); a reused PID
is mapped afresh, exited processes are forgotten, young "no job" answers are re-checked.

Most cases use a small /proc-like tree (the scanner reads any `proc_root`), because a
real PID cannot be made to come back with another start time on demand.
"""

from __future__ import annotations

import os
from pathlib import Path

from nodeagent.cgroups import CLK_TCK, YOUNG_S, JobScanner, read_mounts, scan_jobs
from nodeagent.testing import SlurmLikeCgroups


class FakeProc:
    """A directory laid out like /proc: uptime, PID/stat, PID/cgroup."""

    def __init__(self, root: Path, uptime_s: float = 10_000.0) -> None:
        self.root = root
        self.set_uptime(uptime_s)

    def set_uptime(self, seconds: float) -> None:
        (self.root / "uptime").write_text(f"{seconds:.2f} 1.00\n")

    def process(self, pid: int, start_ticks: int, cgroup: str, utime: int = 10) -> None:
        d = self.root / str(pid)
        d.mkdir(exist_ok=True)
        # fields 3.. after "(comm) ": state ppid pgrp session tty tpgid flags minflt cminflt
        # majflt cmajflt utime stime cutime cstime priority nice threads itrealvalue starttime
        # vsize rss
        rest = ["S", "1", "1", "1", "0", "-1", "0", "0", "0", "0", "0", str(utime), "5"]
        rest += ["0", "0", "20", "0", "1", "0", str(start_ticks), "1000", "25"]
        (d / "stat").write_text(f"{pid} (my prog) " + " ".join(rest) + "\n")
        (d / "cgroup").write_text(cgroup)

    def exit(self, pid: int) -> None:
        for f in (self.root / str(pid)).iterdir():
            f.unlink()
        (self.root / str(pid)).rmdir()


def job_cg(job: int) -> str:
    return f"0::/system.slice/slurmstepd.scope/job_{job}/step_0/user/task_0\n"


OUTSIDE = "0::/user.slice/user-0.slice/session-1.scope\n"
OLD = 100  # start ticks: long before the fake uptime


def test_reused_pid_with_another_start_time_is_mapped_again(tmp_path):
    proc = FakeProc(tmp_path)
    proc.process(500, OLD, job_cg(7))
    proc.process(501, OLD, OUTSIDE)
    scanner = JobScanner(str(tmp_path))
    jobs = scanner.scan()
    assert jobs[7].pids == [500] and set(jobs) == {7}
    assert scanner.cgroup_reads == 2
    # same start time: the cached mapping stands and no cgroup file is read again
    (tmp_path / "500" / "cgroup").write_text(job_cg(8))
    jobs = scanner.scan()
    assert set(jobs) == {7} and scanner.cgroup_reads == 2
    # PID 500 reused by a process of job 9 (another start time): mapped afresh
    proc.process(500, OLD + 50, job_cg(9))
    jobs = scanner.scan()
    assert set(jobs) == {9} and jobs[9].pids == [500]
    assert jobs[9].cpu_by_proc == {(500, OLD + 50): 15 / CLK_TCK}
    assert scanner.cgroup_reads == 3
    # PID 501 reused by a job process: re-mapped even though its old entry said "no job"
    proc.process(501, OLD + 60, job_cg(9))
    assert sorted(scanner.scan()[9].pids) == [500, 501]
    # an uncached one-off scan agrees
    assert sorted(scan_jobs(str(tmp_path))[9].pids) == [500, 501]


def test_exited_processes_are_forgotten(tmp_path):
    proc = FakeProc(tmp_path)
    for pid in (600, 601, 602):
        proc.process(pid, OLD, job_cg(3) if pid != 602 else OUTSIDE)
    scanner = JobScanner(str(tmp_path))
    scanner.scan()
    assert set(scanner.known) == {600, 601, 602}
    proc.exit(601)
    proc.exit(602)
    jobs = scanner.scan()
    assert jobs[3].pids == [600] and set(scanner.known) == {600}


def test_young_process_outside_a_job_is_rechecked_until_old(tmp_path):
    """slurmstepd attaches a task to its cgroup just after fork: a process first seen
    outside any job must still be mapped once it is moved in."""
    uptime = 10_000.0
    proc = FakeProc(tmp_path, uptime)
    start = int((uptime - 1.0) * CLK_TCK)  # started 1 s ago
    proc.process(700, start, OUTSIDE)
    scanner = JobScanner(str(tmp_path))
    assert scanner.scan() == {}
    proc.process(700, start, job_cg(11))  # moved into job 11's step
    assert scanner.scan()[11].pids == [700]
    # once old, "no job" is trusted and the cgroup file is no longer read
    proc.process(701, start, OUTSIDE)
    proc.set_uptime(uptime + YOUNG_S + 1)
    scanner.scan()
    reads = scanner.cgroup_reads
    scanner.scan()
    assert scanner.cgroup_reads == reads


def test_real_processes_in_real_cgroups_stay_mapped_across_scans():
    mounts = read_mounts()
    cg = (
        SlurmLikeCgroups(1, mounts.v1["freezer"])
        if "freezer" in mounts.v1
        else SlurmLikeCgroups(2, mounts.v2)
    )
    try:
        a = cg.start(9301)
        b = cg.start(9302)
        scanner = JobScanner()
        first = scanner.scan()
        assert first[9301].pids == [a] and first[9302].pids == [b]
        second = scanner.scan()
        assert second[9301].pids == [a] and second[9302].pids == [b]
        assert second[9301].placement == first[9301].placement
        os.kill(b, 9)
        cg.procs[1].wait(timeout=10)
        third = scanner.scan()
        assert 9302 not in third and b not in scanner.known
        assert third[9301].pids == [a]
    finally:
        cg.close()
