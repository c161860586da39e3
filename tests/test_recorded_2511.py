"""Both backends' mapping on JSON and pyslurm records recorded from a live Slurm 25.11.2
(slurm_ext/testing/record_fixtures.py), against what each job asked for and what
`sinfo -N -O GresUsed` said. No cluster needed."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

from test_pyslurm_backend import pyslurm_shaped

from slurm_ext.core.model import JobState
from slurm_ext.slurm.cli_backend import CliSlurmClient, job_from_squeue, node_from_sinfo
from slurm_ext.slurm.gres import parse_gpus
from slurm_ext.slurm.pyslurm_mapping import job_from_pyslurm, layout_gpus, node_from_pyslurm

DATA = Path(__file__).parent / "data"


def _load(name: str) -> Any:
    return json.loads((DATA / name).read_text())


TRUTH = _load("truth_25.11_recorded.json")
PYSLURM = _load("pyslurm_25.11_recorded.json")


def _py_record(attrs: dict[str, Any]) -> types.SimpleNamespace:
    fields = {k: pyslurm_shaped(v) for k, v in attrs.items() if k != "layout"}
    layout = attrs.get("layout") or {}
    return types.SimpleNamespace(get_resource_layout_per_node=lambda: layout, **fields)


def test_recorded_from_25_11() -> None:
    assert TRUTH["slurm"].startswith("slurm 25.11") and PYSLURM["pyslurm"].startswith("25.11")


def test_cli_mapping_reads_every_gpu_request() -> None:
    jobs = {j.job_id: j for j in map(job_from_squeue, _load("squeue_25.11_recorded.json")["jobs"])}
    assert {str(i): j.gpus for i, j in jobs.items()} == {
        i: t["gpus"] for i, t in TRUTH["jobs"].items()
    }
    states = {j.state for j in jobs.values()}
    assert JobState.RUNNING in states and JobState.PENDING in states


def test_cli_nodes_on_the_grouped_sinfo_shape(tmp_path: Path) -> None:
    """25.11's sinfo --json groups nodes: the backend reads scontrol --json show nodes."""
    for name, fixture in (("sinfo", "sinfo_25.11_recorded.json"), ("scontrol", None)):
        exe = tmp_path / name
        src = DATA / (fixture or "scontrol_nodes_25.11_recorded.json")
        exe.write_text(f"#!/bin/sh\ncat {src}\n")
        exe.chmod(0o755)
    assert "nodes" not in _load("sinfo_25.11_recorded.json")
    nodes = CliSlurmClient(bin_dir=str(tmp_path)).nodes()
    used = {name: parse_gpus(u)[0] for name, u in TRUTH["gres_used"].items()}
    assert {n.name: n.gpus_alloc for n in nodes} == used
    assert sum(used.values()) > 0 and all(n.gpus == 4 and n.cpus == 16 for n in nodes)


def test_scontrol_node_records_map_like_sinfo_22_05() -> None:
    for rec in _load("scontrol_nodes_25.11_recorded.json")["nodes"]:
        node = node_from_sinfo(rec)
        assert node.gpus_alloc == parse_gpus(TRUTH["gres_used"][node.name])[0]


def test_pyslurm_running_jobs_and_nodes_read_their_gpus() -> None:
    """Running jobs from their layouts; pending --gpus requests are what pyslurm 25.11.2
    loses (the backend asks squeue for those, tested live)."""
    by_id = {}
    for attrs in PYSLURM["jobs"]:
        job = job_from_pyslurm(_py_record(attrs))
        by_id[str(job.job_id)] = job
    for job_id, truth in TRUTH["jobs"].items():
        job = by_id[job_id]
        if job.state == JobState.RUNNING or "per-job" not in truth["args"]:
            assert job.gpus == truth["gpus"], (truth, job)
        else:
            assert job.gpus == 0, "pyslurm now reads tres_per_job: drop the squeue fallback"
    used: dict[str, int] = {}
    for attrs in PYSLURM["jobs"]:
        if "RUNNING" in str(attrs["state"]):
            for node, n in layout_gpus(_py_record(attrs)).items():
                used[node] = used.get(node, 0) + n
    assert used == {n: parse_gpus(u)[0] for n, u in TRUTH["gres_used"].items() if parse_gpus(u)[0]}
    for attrs in PYSLURM["nodes"]:
        node = node_from_pyslurm(_py_record(attrs))
        assert node.gpus == 4 and node.gpus_alloc == 0  # allocated_gres: empty in 25.11
