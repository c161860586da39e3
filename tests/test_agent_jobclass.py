"""Where a job's co-location class comes from, on a real local Slurm cluster.

The harness has no slurmdbd, so QOS cannot be set: a second partition `opp` (listed as
opportunistic) stands in. Jobs run under proctrack/linuxproc without job cgroups, so the
agent maps a job's process by SLURM_JOB_ID from its environment once the process is on a
(simulated) GPU; its class comes from the environment ("environ") or from slurmctld
("slurm").
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from conftest import wait_for

from nodeagent.agent import Agent
from nodeagent.cgroups import job_slurm_env
from nodeagent.config import AgentConfig
from nodeagent.gpu import SimulatedGpuReader
from slurm_ext.core.config import ConfigError, load_config
from slurm_ext.core.model import Job, JobClasses
from slurm_ext.slurm.cli_backend import CliSlurmClient
from slurm_ext.testing.cluster import LocalCluster

GIB = 2**30

# The batch script re-execs itself with SLURM_JOB_PARTITION=gpu: from then on the job's
# first process claims the guaranteed partition. It records its PID (unchanged by exec).
SPOOF = """\
#!/bin/bash
if [ "$SLURM_JOB_PARTITION" != gpu ]; then
    exec env SLURM_JOB_PARTITION=gpu /bin/bash "$0"
fi
echo $$ > pid.$SLURM_JOB_ID
exec sleep 300
"""


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class CountingClient(CliSlurmClient):
    """The real CLI client, counting `squeue --json` calls."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.calls = 0

    def jobs(self, states: Sequence[str] = ("PENDING", "RUNNING", "SUSPENDED")) -> list[Job]:
        self.calls += 1
        return super().jobs(states)


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """Our own 2-node cluster with a second partition `opp` beside the default `gpu`."""
    c = LocalCluster(
        nodes=2,
        gpus_per_node=1,
        cpus_per_node=2,
        memory_mb=4000,
        extra_conf="PartitionName=opp Nodes=node[1-2] MaxTime=INFINITE State=UP",
    )
    c.start()
    try:
        yield c
    finally:
        c.run("scancel", "--full", "--partition=opp", check=False)  # stop() cancels `gpu` only
        c.cleanup()


class Jobs:
    """Submits batch jobs to the cluster and cancels exactly those afterwards."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.ids: list[int] = []
        assert cluster.root is not None
        self.dir = cluster.root / "jobs"
        self.script = self.dir / "spoof.sh"
        self.script.write_text(SPOOF)

    def submit(self, *args: str) -> tuple[int, int]:
        """Submit the spoofing script; return (job id, PID of its process) once it runs."""
        out = self.cluster.run(
            "sbatch", "--parsable", f"--chdir={self.dir}", *args, str(self.script)
        )
        job = int(out.strip().split(";")[0])
        self.ids.append(job)
        pidfile: Path = self.dir / f"pid.{job}"
        text = wait_for(
            lambda: pidfile.exists() and pidfile.read_text().strip(),
            timeout=30,
            what=f"job {job} running",
        )
        return job, int(text)

    def node_of(self, job: int) -> str:
        return self.cluster.run("squeue", "-h", "-j", str(job), "-o", "%N").strip()

    def cancel(self) -> None:
        if self.ids:
            self.cluster.run("scancel", "--full", *map(str, self.ids), check=False)


@pytest.fixture
def jobs(cluster: LocalCluster) -> Iterator[Jobs]:
    j = Jobs(cluster)
    try:
        yield j
    finally:
        j.cancel()


def make_agent(
    tmp_path: Path,
    source: str,
    node: str,
    clock: Clock,
    sim: SimulatedGpuReader,
    client: CliSlurmClient | None = None,
    default_class: str = "guaranteed",
) -> Agent:
    cfg = AgentConfig(node_name=node, state_file=str(tmp_path / f"state-{source}.json"))
    cfg.jobs.source = source
    cfg.jobs.cache_s = 60.0
    classes = JobClasses(
        opportunistic_partitions=("opp",),
        guaranteed_partitions=("gpu",),
        default_class=default_class,
    )
    return Agent(cfg, sim, None, clock=clock, wall=clock, slurm=client, classes=classes)


def test_environ_class_is_spoofable_slurm_class_is_not(tmp_path, cluster, jobs):
    job, pid = jobs.submit("--partition=opp")
    env = job_slurm_env([pid])
    assert (env["SLURM_JOB_ID"], env["SLURM_JOB_PARTITION"]) == (str(job), "gpu")  # spoofed
    clock = Clock()
    sim = SimulatedGpuReader(1, clock=clock)
    sim.assign(pid, 0, GIB, 0.5)
    node = jobs.node_of(job)

    environ = make_agent(tmp_path, "environ", node, clock, sim)
    environ.step()
    acc = environ.accounts[job]
    assert (acc.klass, acc.partition) == ("guaranteed", "gpu")  # the weakness of "environ"

    client = CountingClient(slurm_conf=str(cluster.conf_path), timeout=10)
    trusted = make_agent(tmp_path, "slurm", node, clock, sim, client)
    trusted.step()
    acc = trusted.accounts[job]
    assert (acc.klass, acc.partition) == ("opportunistic", "opp")
    assert client.calls == 1 and "slurm" not in trusted.error_counts


def test_one_squeue_per_refresh_and_answers_cached_per_job(tmp_path, cluster, jobs):
    a, pid_a = jobs.submit("--partition=opp", "--nodelist=node1")
    b, pid_b = jobs.submit("--partition=gpu", "--nodelist=node1")
    c, pid_c = jobs.submit("--partition=gpu", "--nodelist=node2")
    stray = subprocess.Popen(["sleep", "300"], env=dict(os.environ, SLURM_JOB_ID="987654"))
    try:
        clock = Clock()
        sim = SimulatedGpuReader(4, clock=clock)
        client = CountingClient(slurm_conf=str(cluster.conf_path), timeout=10)
        agent = make_agent(tmp_path, "slurm", "node1", clock, sim, client)
        agent.config.colocation.enabled = False  # classes only; no pausing here

        sim.assign(pid_a, 0, GIB, 0.5)
        agent.step()
        assert client.calls == 1
        clock.t += 5
        agent.step()
        clock.t += 5
        agent.step()
        assert client.calls == 1  # a known job within cache_s: Slurm is not asked

        # three new job ids at once: one refresh answers for all of them
        sim.assign(pid_b, 1, GIB, 0.5)
        sim.assign(pid_c, 2, GIB, 0.5)
        sim.assign(stray.pid, 3, GIB, 0.5)
        clock.t += 5
        agent.step()
        assert client.calls == 2
        got = {j: (agent.accounts[j].klass, agent.accounts[j].partition) for j in (a, b)}
        assert got == {a: ("opportunistic", "opp"), b: ("guaranteed", "gpu")}
        # mapped only by SLURM_JOB_ID and not vouched for by Slurm: ignored (c runs on
        # node2, not here; 987654 is unknown), and remembered as such for cache_s
        assert c not in agent.accounts and 987654 not in agent.accounts
        assert agent.error_counts["unvouched"] == 2
        for _ in range(3):
            clock.t += 5
            agent.step()
        assert client.calls == 2

        clock.t += 60  # every answer expired: one more call
        agent.step()
        assert client.calls == 3
        assert agent.accounts[a].klass == "opportunistic"
        assert "slurm" not in agent.error_counts
    finally:
        stray.kill()
        stray.wait()


def test_slurm_outage_falls_back_to_default_class_not_environ(tmp_path, cluster, jobs, caplog):
    # An honest job in `gpu` (guaranteed): its environment says so too. With the default
    # class set to opportunistic, the class during the outage shows it is not read from
    # the environment.
    job, pid = jobs.submit("--partition=gpu")
    assert job_slurm_env([pid])["SLURM_JOB_PARTITION"] == "gpu"
    clock = Clock()
    sim = SimulatedGpuReader(1, clock=clock)
    sim.assign(pid, 0, GIB, 0.5)
    client = CountingClient(slurm_conf=str(cluster.conf_path), timeout=10)
    agent = make_agent(
        tmp_path, "slurm", jobs.node_of(job), clock, sim, client, default_class="opportunistic"
    )
    caplog.set_level(logging.INFO, logger="nodeagent.jobinfo")
    cluster.stop_slurmctld()
    try:
        agent.step()  # must not raise
        for _ in range(2):
            clock.t += 61  # past the retry delay: asks again
            agent.step()
        assert client.calls == 3
        assert agent.error_counts["slurm"] == 3
        # no job cgroups here: the process names its job only by SLURM_JOB_ID, and with
        # Slurm silent nobody vouches for it: not counted at all, never classed by environ
        assert job not in agent.accounts
        warnings = [
            r
            for r in caplog.records
            if r.levelno == logging.WARNING and r.name == "nodeagent.jobinfo"
        ]
        assert len(warnings) == 1 and "cannot ask Slurm" in warnings[0].getMessage()
        clock.t += 5
        agent.step()  # within the retry delay: no new call
        assert client.calls == 3
    finally:
        cluster.start_slurmctld()
    wait_for(
        lambda: cluster.run("squeue", "-h", "-j", str(job), "-o", "%T", check=False).strip(),
        timeout=30,
        what="slurmctld back",
    )
    clock.t += 61
    agent.step()
    acc = agent.accounts[job]
    assert (acc.klass, acc.partition) == ("guaranteed", "gpu")  # Slurm's answer again
    assert agent.error_counts["slurm"] == 3 and "step" not in agent.error_counts
    assert any("answers again" in r.getMessage() for r in caplog.records)


def test_unknown_source_is_a_config_error_naming_the_key(tmp_path):
    cfg = tmp_path / "agent.toml"
    cfg.write_text('[jobs]\nsource = "env"\n')
    with pytest.raises(ConfigError, match="jobs.source"):
        load_config(AgentConfig, cfg)
    assert AgentConfig().jobs.source == "slurm"  # the trusted source unless told otherwise
