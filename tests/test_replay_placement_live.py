"""`slurm-ext replay --placement-hints` on a real slurmctld + slurmdbd: the service runs with
its hints on, and the placement figures come from sacct's nodes for every run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_ext.core import tomlio
from slurm_ext.replay.modes import ClusterSpec, ReplayOptions, replay_mode
from slurm_ext.replay.placement import load_allocations
from slurm_ext.sim.traces import TraceJob

pytestmark = pytest.mark.slurm


def _trace() -> list[TraceJob]:
    """2 nodes x 4 GPUs, a width mix that leaves holes: 1-, 2- and 4-GPU jobs."""
    widths = [1, 2, 4, 1, 4, 2, 1, 4, 2, 1]
    return [TraceJob(i, g, 20.0 * i, 120.0 + 30.0 * (i % 3)) for i, g in enumerate(widths)]


def test_replay_with_placement_hints_records_each_runs_nodes(tmp_path: Path) -> None:
    options = ReplayOptions(60.0, placement="consolidate")
    row = replay_mode(_trace(), "service", tmp_path, options, ClusterSpec(2, 4))
    cfg = tomlio.loads((tmp_path / "service.toml").read_text())
    assert cfg["placement"] is True and cfg["placement_mode"] == "consolidate"
    assert row["placement_hints"] == "consolidate" and row["jobs"] == 10
    jobs = load_allocations(tmp_path / "allocations.json")
    assert sorted(jobs) == list(range(10))
    # Slurm's record of the nodes: every job ran on one of the two nodes, never more GPUs
    # on a node at once than it has, and sacct's run times are the records' own
    records = json.loads((tmp_path / "records.json").read_text())
    events = []
    for tid, job in jobs.items():
        assert job.runs and all(len(alloc) == 1 for _, _, alloc in job.runs)
        assert [[s, e] for s, e, _ in job.runs] == records[str(tid)]["runs"]
        for s, e, alloc in job.runs:
            (node, gpus) = alloc[0]
            assert gpus == job.gpus
            events += [(s, 1, node, gpus), (e, 0, node, -gpus)]
    used: dict[str, int] = {}
    for _, _, node, delta in sorted(events):
        used[node] = used.get(node, 0) + delta
        assert used[node] <= 4
    assert len(used) <= 2
    for key in ("wait4_s", "wait8_s", "frag_share", "idle_share"):
        assert key in row
    assert 0.0 <= row["frag_share"] <= row["idle_share"] <= 1.0
    assert row["jobs4"] == 3.0 and row["jobs8"] == 0.0
