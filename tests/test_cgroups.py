"""Process -> job mapping on real /proc strings and real cgroups; pause and resume real
processes through the v1 freezer, v2 cgroup.freeze and SIGSTOP."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from nodeagent.cgroups import (
    cpuset_size,
    job_dir,
    job_slurm_env,
    parse_mounts,
    parse_proc_cgroup,
    read_mounts,
    scan_jobs,
)
from nodeagent.freezer import JobFreezer
from nodeagent.testing import BUSY, SlurmLikeCgroups, cpu_used_during, runs

V1_SLURM = """12:freezer:/slurm/uid_1000/job_4242/step_batch/task_0
11:memory:/slurm/uid_1000/job_4242/step_batch/task_0
10:cpuset:/slurm/uid_1000/job_4242/step_batch
9:name=systemd:/system.slice/slurmd.service
1:cpu,cpuacct:/slurm/uid_1000/job_4242/step_batch/task_0
"""
V2_SLURM = "0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0\n"
V2_MULTI = "0::/system.slice/node01_slurmstepd.scope/job_123456/step_extern/slurm\n"


def test_parse_v1_slurm_path():
    p = parse_proc_cgroup(V1_SLURM)
    assert (p.job_id, p.step, p.uid) == (4242, "batch", 1000)
    assert p.v1["freezer"] == "/slurm/uid_1000/job_4242/step_batch/task_0"
    assert p.v1["cpuacct"] == p.v1["cpu"]
    assert p.v2 is None
    assert job_dir(p.v1["freezer"]) == "/slurm/uid_1000/job_4242"


def test_parse_v2_slurm_paths():
    p = parse_proc_cgroup(V2_SLURM)
    assert (p.job_id, p.step, p.uid) == (77, "0", None)
    assert job_dir(p.v2) == "/system.slice/slurmstepd.scope/job_77"
    q = parse_proc_cgroup(V2_MULTI)
    assert (q.job_id, q.step) == (123456, "extern")


def test_parse_non_job_and_lookalikes():
    assert parse_proc_cgroup("0::/user.slice/user-0.slice/session-1.scope\n").job_id is None
    assert parse_proc_cgroup("0::/system.slice/my_job_12.service\n").job_id is None
    assert parse_proc_cgroup("0::/x/job_12abc/step_0\n").job_id is None


def test_parse_mounts_hybrid():
    text = (
        "tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0\n"
        "cgroup /sys/fs/cgroup/freezer cgroup rw,relatime,freezer 0 0\n"
        "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,nodev,noexec,relatime,cpu,cpuacct 0 0\n"
        "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n"
    )
    m = parse_mounts(text)
    assert m.v2 == "/sys/fs/cgroup/unified"
    assert m.v1 == {
        "freezer": "/sys/fs/cgroup/freezer",
        "cpu": "/sys/fs/cgroup/cpu,cpuacct",
        "cpuacct": "/sys/fs/cgroup/cpu,cpuacct",
    }


def test_cpuset_size():
    assert cpuset_size("0-3,8,10-11\n") == 7
    assert cpuset_size("5") == 1


MOUNTS = read_mounts()


def _cgroups(version: int) -> SlurmLikeCgroups:
    if version == 1:
        if "freezer" not in MOUNTS.v1:
            pytest.skip("kernel has no cgroup v1 freezer mounted")
        return SlurmLikeCgroups(1, MOUNTS.v1["freezer"])
    if MOUNTS.v2 is None:
        pytest.skip("no cgroup v2 mount on this machine")
    return SlurmLikeCgroups(2, MOUNTS.v2)


@pytest.fixture(params=[1, 2], ids=["v1-freezer", "v2-freeze"])
def cg(request):
    c = _cgroups(request.param)
    yield c
    c.close()


def test_real_mapping_pause_resume(cg):
    env = {"SLURM_JOB_QOS": "scavenger", "SLURM_JOB_PARTITION": "gpu"}
    busy = [cg.start(9101, BUSY, env), cg.start(9101, BUSY, env)]
    other = cg.start(9102)
    jobs = scan_jobs()
    assert sorted(jobs[9101].pids) == sorted(busy)
    assert jobs[9102].pids == [other]
    assert not jobs[9101].from_environ
    assert job_slurm_env(jobs[9101].pids)["SLURM_JOB_QOS"] == "scavenger"
    assert runs(busy)
    freezer = JobFreezer(MOUNTS)
    assert freezer.frozen(jobs[9101]) is None
    rec = freezer.pause(jobs[9101])
    assert rec.method == ("cgroup-v1" if cg.version == 1 else "cgroup-v2")
    cpu_used_during(busy, 0.1)  # let the freeze settle
    assert cpu_used_during(busy, 0.4) < 0.02
    assert freezer.frozen(jobs[9101]) == rec  # what an agent that lost its record finds
    assert freezer.frozen(jobs[9102]) is None
    assert freezer.resume(rec)
    assert runs(busy)
    assert freezer.frozen(jobs[9101]) is None


def test_environ_fallback_and_sigstop(tmp_path):
    env = dict(os.environ, SLURM_JOB_ID="9200")
    p = subprocess.Popen([sys.executable, "-c", BUSY], env=env)
    try:
        assert 9200 not in scan_jobs()  # not a GPU process: no environ lookup
        jobs = scan_jobs(extra_pids=[p.pid])
        assert jobs[9200].pids == [p.pid] and jobs[9200].from_environ
        freezer = JobFreezer(MOUNTS)
        rec = freezer.pause(jobs[9200])
        assert rec.method == "sigstop"
        cpu_used_during([p.pid], 0.05)
        assert cpu_used_during([p.pid], 0.3) < 0.02
        assert freezer.resume(rec)
        assert runs([p.pid])
    finally:
        os.kill(p.pid, 18)  # SIGCONT, in case an assertion left it stopped
        p.kill()
        p.wait()


def test_earliest_process_environment_is_trusted(cg):
    first = cg.start(9301, env={"SLURM_JOB_QOS": "scavenger"})
    time.sleep(0.05)  # start times tick at 10 ms
    second = cg.start(9301, env={"SLURM_JOB_QOS": "high"})  # a child re-exporting QOS
    assert job_slurm_env([second, first])["SLURM_JOB_QOS"] == "scavenger"
