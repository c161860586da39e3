"""The deployment examples agree with the code and Slurm: scrape ports, roll-back commands."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from conftest import wait_for

from slurm_ext.core import tomlio
from slurm_ext.service.loop import ServiceConfig
from slurm_ext.testing.cluster import LocalCluster

ETC = Path(__file__).resolve().parents[1] / "etc"


def test_scrape_config_targets_the_default_ports() -> None:
    text = (ETC / "prometheus-scrape.yml").read_text()
    jobs = dict(re.findall(r"- job_name: (\S+)\n(.*?)(?=\n  - job_name|\Z)", text, re.S))
    assert set(jobs) == {"slurm-ext-service", "slurm-ext-agent"}
    service_ports = set(re.findall(r'"[^":]+:(\d+)"', jobs["slurm-ext-service"]))
    agent_ports = set(re.findall(r'"[^":]+:(\d+)"', jobs["slurm-ext-agent"]))
    assert service_ports == {str(ServiceConfig().port)}
    assert agent_ports == {str(tomlio.loads((ETC / "agent.toml").read_text())["exporter"]["port"])}
    assert "\t" not in text  # YAML forbids tabs for indentation


@pytest.mark.slurm
def test_admin_guide_rollback_returns_priorities_to_multifactor(clean_queue: LocalCluster) -> None:
    """The roll-back commands of docs/admin-guide.md, run as written, on pending jobs."""
    cluster = clean_queue
    guide = (Path(__file__).resolve().parents[1] / "docs" / "admin-guide.md").read_text()
    commands = [
        line.strip() for line in guide.splitlines() if line.strip().startswith("squeue -h -t PD")
    ]
    assert len(commands) == 2, commands
    jobs = [cluster.sbatch("--begin=now+3600", "--time=5") for _ in range(2)]

    def priority(job: int) -> int:
        out = cluster.run("scontrol", "show", "job", "-o", str(job))
        return int(re.search(r"\bPriority=(\d+)", out).group(1))

    base = {job: priority(job) for job in jobs}
    for job in jobs:  # what the service writes in its two modes
        cluster.run("scontrol", "update", f"JobId={job}", "SiteFactor=777")
    wait_for(lambda: all(priority(j) >= 777 for j in jobs), what="site factor applied")
    subprocess.run(commands[0], shell=True, env=cluster.env, check=True, timeout=30)
    wait_for(lambda: all(priority(j) == base[j] for j in jobs), what="site factor rolled back")

    for job in jobs:
        cluster.run("scontrol", "update", f"JobId={job}", "Priority=5000")
    assert all(priority(j) == 5000 for j in jobs)
    subprocess.run(commands[1], shell=True, env=cluster.env, check=True, timeout=30)
    wait_for(lambda: all(priority(j) == base[j] for j in jobs), what="fixed priority released")
