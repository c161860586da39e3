"""The deployment examples agree with the code: ports in the Prometheus scrape config."""

from __future__ import annotations

import re
from pathlib import Path

import toml

from slurm_ext.service import ServiceConfig

ETC = Path(__file__).resolve().parents[1] / "etc"


def test_scrape_config_targets_the_default_ports() -> None:
    text = (ETC / "prometheus-scrape.yml").read_text()
    jobs = dict(re.findall(r"- job_name: (\S+)\n(.*?)(?=\n  - job_name|\Z)", text, re.S))
    assert set(jobs) == {"slurm-ext-service", "slurm-ext-agent"}
    service_ports = set(re.findall(r'"[^":]+:(\d+)"', jobs["slurm-ext-service"]))
    agent_ports = set(re.findall(r'"[^":]+:(\d+)"', jobs["slurm-ext-agent"]))
    assert service_ports == {str(ServiceConfig().port)}
    assert agent_ports == {str(toml.load(ETC / "agent.toml")["exporter"]["port"])}
    assert "\t" not in text  # YAML forbids tabs for indentation
