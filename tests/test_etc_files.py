"""etc/grafana-dashboard.json and etc/prometheus-rules.yml parse, and every metric they
name is one the code exports (collected from the real exporters' registries);
etc/slurm.conf.snippet requires nothing that is a site's own choice."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from conftest import snippet_lines

from nodeagent.agent import Agent
from nodeagent.config import AgentConfig
from nodeagent.exporter import make_jobstats_registry, make_registry
from nodeagent.gpu import SimulatedGpuReader
from slurm_ext.core import tomlio
from slurm_ext.service.metrics import ServiceMetrics

ETC = Path(__file__).resolve().parents[1] / "etc"
METRIC_RE = re.compile(r"\b((?:slurm_ext|nvidia_gpu)_[A-Za-z0-9_]+)\b")
SERIES_SUFFIXES = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"]}


def exported_names() -> set[str]:
    """Sample names the agent and the service can expose, from their registries."""
    agent = Agent(AgentConfig(node_name="t", state_file=""), SimulatedGpuReader(1), None)
    registries = [make_registry(agent), make_jobstats_registry(agent), ServiceMetrics().registry]
    names = set()
    for registry in registries:
        for family in registry.collect():
            for suffix in SERIES_SUFFIXES.get(family.type, [""]):
                names.add(family.name + suffix)
    return names


EXPORTED = exported_names()


def dashboard_exprs() -> list[str]:
    doc = json.loads((ETC / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in doc["templating"]["list"] if "definition" in v]
    return exprs


def rules() -> list[dict]:
    doc = yaml.safe_load((ETC / "prometheus-rules.yml").read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


def balanced(expr: str) -> bool:
    depth = {"(": 0, "{": 0, "[": 0}
    closing = {")": "(", "}": "{", "]": "["}
    for ch in expr:
        if ch in depth:
            depth[ch] += 1
        elif ch in closing:
            depth[closing[ch]] -= 1
            if depth[closing[ch]] < 0:
                return False
    return not any(depth.values())


def test_exporters_yield_the_names_we_expect():
    """Guards the collection itself: a few names from each exporter, with their suffixes."""
    assert {
        "slurm_ext_gpu_utilization_ratio",
        "slurm_ext_gpu_energy_joules_total",
        "slurm_ext_job_paused",
        "nvidia_gpu_duty_cycle",
        "slurm_ext_pass_duration_seconds_bucket",
        "slurm_ext_reports_refused_total",
        "slurm_ext_last_pass_timestamp_seconds",
    } <= EXPORTED
    assert "slurm_ext_gpu_energy_joules" not in EXPORTED  # counters end in _total


def test_dashboard_is_valid_and_names_only_exported_metrics():
    doc = json.loads((ETC / "grafana-dashboard.json").read_text())
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids)) and doc["uid"] and doc["schemaVersion"] >= 30
    for p in doc["panels"]:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        if p["type"] != "row":
            assert p["targets"], p["title"]
            assert [t["refId"] for t in p["targets"]] == [
                chr(65 + i) for i in range(len(p["targets"]))
            ]
    exprs = dashboard_exprs()
    used = {m for e in exprs for m in METRIC_RE.findall(e)}
    assert all(balanced(e) for e in exprs), [e for e in exprs if not balanced(e)]
    assert used - EXPORTED == set()
    # what the dashboard is for: GPUs, jobs, co-location, the service
    assert {
        "slurm_ext_gpu_utilization_ratio",
        "slurm_ext_gpu_power_watts",
        "slurm_ext_gpu_energy_joules_total",
        "slurm_ext_gpu_memory_used_bytes",
        "slurm_ext_job_gpu_energy_joules_total",
        "slurm_ext_job_paused",
        "slurm_ext_pass_duration_seconds_bucket",
        "slurm_ext_writes_total",
        "slurm_ext_slurm_call_errors_total",
        "slurm_ext_failed_passes_total",
        "slurm_ext_queue_jobs",
        "slurm_ext_reports_received_total",
        "slurm_ext_reports_refused_total",
    } <= used


def test_rules_are_valid_and_name_only_exported_metrics():
    rs = rules()
    names = [r["alert"] for r in rs]
    assert len(names) == len(set(names))
    for r in rs:
        assert set(r) <= {"alert", "expr", "for", "labels", "annotations"}, r["alert"]
        assert re.fullmatch(r"\d+[smh]", r["for"]), r["alert"]
        assert r["labels"]["severity"] in ("critical", "warning", "info"), r["alert"]
        assert r["annotations"]["summary"], r["alert"]
        assert balanced(r["expr"]), r["alert"]
    used = {m for r in rs for m in METRIC_RE.findall(r["expr"])}
    assert used - EXPORTED == set()
    by_name = {r["alert"]: r["expr"] for r in rs}
    assert "slurm_ext_last_pass_timestamp_seconds > 300" in by_name["SlurmExtServicePassStale"]
    assert by_name["SlurmExtJobPausedLong"] == "slurm_ext_job_paused == 1"
    assert next(r for r in rs if r["alert"] == "SlurmExtJobPausedLong")["for"] == "30m"


def test_rules_use_the_scrape_job_names():
    scrape = yaml.safe_load((ETC / "prometheus-scrape.yml").read_text())
    jobs = {c["job_name"] for c in scrape["scrape_configs"]}
    used = {j for r in rules() for j in re.findall(r'\bjob="([^"]+)"', r["expr"])}
    assert used == jobs


@pytest.mark.parametrize("bad", ["slurm_ext_gpu_energy_joules", "slurm_ext_pass_seconds"])
def test_a_wrong_name_would_be_caught(bad):
    assert set(METRIC_RE.findall(f"rate({bad}[5m])")) - EXPORTED == {bad}


def test_the_snippet_requires_no_site_choice():
    """Its required lines leave a site's priority weights, calc period and requeue default
    as they are; its recommended lines are commented out; the CPUs per GPU it requires are
    the predictor's default, which applies through them."""
    required = dict(line.split("=", 1) for line in snippet_lines(recommended=False))
    assert required["PriorityType"] == "priority/multifactor"  # SiteFactor is its term
    assert [k for k in required if k.startswith("Priority")] == ["PriorityType"]
    assert "JobRequeue" not in required and "shard" in required["GresTypes"].split(",")
    recommended = dict(line.split("=", 1) for line in snippet_lines()).keys() - required
    assert recommended == {"SelectTypeParameters", "DefMemPerCPU", "PriorityWeightAge"}
    predictor = tomlio.loads((ETC / "predictor.toml").read_text())["predictor"]
    assert int(required["DefCpuPerGPU"]) == predictor["site_default_cpus_per_gpu"]
