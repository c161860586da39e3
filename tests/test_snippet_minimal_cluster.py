"""etc/slurm.conf.snippet on top of a minimal slurm.conf with nothing else, its required
lines and its recommended ones taken (a site that sets none of those keys): the harness's
own settings (DefMemPerCPU among them) are taken out, so what the snippet leaves unset is
Slurm's default. A job without --mem must not take a whole node's memory: four 1-GPU jobs
share one 4-GPU node."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from conftest import snippet_lines, wait_for

from slurm_ext.predict.hook import render_hook
from slurm_ext.testing.cluster import LocalCluster

pytestmark = pytest.mark.slurm

# what the harness needs to run daemons as root in a container on loopback, nothing more
ESSENTIAL = (
    "ClusterName", "SlurmctldHost", "SlurmctldPort", "SlurmdPort", "AuthType", "CredType",
    "AuthInfo", "SlurmUser", "SlurmdUser", "StateSaveLocation", "SlurmdSpoolDir",
    "SlurmctldPidFile", "SlurmdPidFile", "SlurmctldLogFile", "SlurmdLogFile",
    "ProctrackType", "TaskPlugin", "SlurmdParameters", "ReturnToService", "MpiDefault",
    "MailProg", "NodeName", "PartitionName",
)  # fmt: skip


class MinimalSnippetCluster(LocalCluster):
    def _write_files(self) -> None:
        super()._write_files()
        kept = [
            line
            for line in self.conf_path.read_text().splitlines()
            if line.partition("=")[0] in ESSENTIAL
        ]
        assert not any(line.startswith("DefMem") for line in kept)
        self.conf_path.write_text("\n".join(snippet_lines() + kept) + "\n")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    table = tmp_path_factory.mktemp("predictor") / "predictor.tsv"  # absent: hook fails open
    c = MinimalSnippetCluster(
        nodes=1, gpus_per_node=4, cpus_per_node=16, job_submit_lua=render_hook(table)
    )
    c.start()
    try:
        yield c
    finally:
        c.cleanup()


def test_the_snippet_sets_a_default_memory_per_job(cluster: LocalCluster) -> None:
    config = cluster.run("scontrol", "show", "config")
    assert re.search(r"^SelectTypeParameters\s*=\s*CR_CORE_MEMORY", config, re.M | re.I)
    assert re.search(r"^DefMemPer(CPU|GPU|Node)\s*=\s*\d+", config, re.M), "no DefMemPer*"


def test_jobs_without_mem_share_a_node(cluster: LocalCluster) -> None:
    jobs = [cluster.sbatch("-n1", "--gres=gpu:1", "-J", f"nomem{i}") for i in range(4)]
    try:

        def states() -> list[str]:
            out = cluster.run("squeue", "-h", "-o", "%i %T")
            got = dict(line.split() for line in out.splitlines())
            return [got.get(str(j), "GONE") for j in jobs]

        wait_for(lambda: states() == ["RUNNING"] * 4, timeout=30,
                 what="four 1-GPU jobs without --mem running together")  # fmt: skip
    finally:
        cluster.run("scancel", *map(str, jobs), check=False)
