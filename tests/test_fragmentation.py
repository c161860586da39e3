"""The fragmentation metric on hand-made allocation timelines, sacct's NodeList rows, and
the replay's placement-hints option (the service config it writes)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_ext.cli import main as cli_main
from slurm_ext.core.config import load_config
from slurm_ext.core.fragmentation import (
    JobRuns,
    even_split,
    fragmentation_gpu_s,
    stranded_gpus,
    summarize,
)
from slurm_ext.replay.placement import enable_hints, parse_allocations
from slurm_ext.replay.service import write_config
from slurm_ext.service.loop import ServiceConfig

NODES = {"n1": 4, "n2": 4}


def test_stranded_gpus_counts_free_gpus_below_the_widest_waiting_width() -> None:
    assert stranded_gpus([0, 3, 5, 8], widest_waiting=6, gpus_per_node=8) == 8  # 3 + 5
    # a waiting job wider than a node needs whole nodes: W is the node's size
    assert stranded_gpus([0, 3, 5, 8], widest_waiting=16, gpus_per_node=8) == 8
    assert stranded_gpus([1, 1, 2], widest_waiting=2, gpus_per_node=8) == 2
    assert stranded_gpus([3, 5], widest_waiting=0, gpus_per_node=8) == 0  # nothing waits


def _timeline(b_runs: list[tuple[float, float, tuple]]) -> list[JobRuns]:
    """2 nodes x 4 GPUs. A: 2 GPUs on n1 over [0, 10]; C: 2 GPUs on n2 over [0, 6];
    B: 4 GPUs submitted at 2, so from 2 to 6 it waits with 2 GPUs free on each node."""
    return [
        JobRuns(1, 2, 0.0, [(0.0, 10.0, (("n1", 2),))]),
        JobRuns(2, 4, 2.0, b_runs),
        JobRuns(3, 2, 0.0, [(0.0, 6.0, (("n2", 2),))]),
    ]


def test_fragmentation_integrates_stranded_gpus_over_the_timeline() -> None:
    jobs = _timeline([(6.0, 16.0, (("n2", 4),))])
    # 4 GPUs stranded (2 on n1, 2 on n2) for 4 s; B starts the instant C ends
    assert fragmentation_gpu_s(jobs, NODES, 4) == (16.0, 16.0)
    out = summarize(jobs, NODES, 4, scale=10.0)
    assert out["wait4_s"] == 40.0 and out["jobs4"] == 1.0  # 4 s x scale 10
    assert out["jobs8"] == 0.0 and out["wait8_s"] == 0.0
    assert out["frag_share"] == pytest.approx(16.0 / (8 * 16.0))  # span 0..16, 8 GPUs
    assert out["avg_jct_s"] == pytest.approx(10.0 * (10.0 + 14.0 + 6.0) / 3)


def test_a_requeued_job_waits_again_between_its_runs() -> None:
    jobs = _timeline([(6.0, 8.0, (("n2", 4),)), (12.0, 16.0, (("n2", 4),))])
    frag, idle = fragmentation_gpu_s(jobs, NODES, 4)
    # 8..10: n1 has 2 free (stranded), n2 4 free (not); 10..12: both nodes wholly free
    assert frag == 16.0 + 2 * 2.0
    assert idle == 16.0 + 2 * 6.0 + 2 * 8.0
    # the wait to *first* start is unchanged by the requeue
    assert summarize(jobs, NODES, 4)["wait4_s"] == 4.0


def test_a_job_started_at_its_submit_never_counts_as_waiting() -> None:
    jobs = [
        JobRuns(1, 4, 5.0, [(5.0, 9.0, (("n1", 4),))]),
        JobRuns(2, 1, 0.0, [(0, 9, (("n2", 1),))]),
    ]
    assert fragmentation_gpu_s(jobs, NODES, 4) == (0.0, 0.0)


def test_even_split_puts_the_remainder_on_the_first_nodes() -> None:
    assert even_split(6, ["a", "b", "c", "d"]) == [("a", 2), ("b", 2), ("c", 1), ("d", 1)]
    assert even_split(8, ["a", "b"]) == [("a", 4), ("b", 4)]
    assert even_split(3, []) == []


def test_parse_allocations_reads_nodes_of_every_run() -> None:
    text = (
        "7|REQUEUED|2026-01-01T00:00:00|2026-01-01T00:00:05|2026-01-01T00:00:09|"
        "billing=1,cpu=2,gres/gpu=8,node=2|gpu[1-2]\n"
        "7|COMPLETED|2026-01-01T00:00:00|2026-01-01T00:00:20|2026-01-01T00:00:30|"
        "billing=1,cpu=2,gres/gpu=8,node=2|gpu[2,4]\n"
        "8|PENDING|2026-01-01T00:00:03|Unknown|Unknown||None assigned\n"
        "9|COMPLETED|2026-01-01T00:00:01|2026-01-01T00:00:01|2026-01-01T00:00:02|gres/gpu=2|gpu3\n"
        "garbage line\n"
    )
    out = parse_allocations(text, {7: 8, 8: 1, 9: 2}, now=0.0)
    assert [alloc for _, _, alloc in out[7].runs] == [
        (("gpu1", 4), ("gpu2", 4)),
        (("gpu2", 4), ("gpu4", 4)),
    ]
    assert out[7].runs[1][1] - out[7].runs[1][0] == 10.0
    assert out[8].runs == []  # never ran: no run, but its submit is kept
    assert out[9].gpus == 2 and out[9].runs[0][2] == (("gpu3", 2),)


def test_enable_hints_turns_on_the_services_placement(tmp_path: Path) -> None:
    path = write_config(tmp_path / "s.toml", "/x/slurm.conf", "gpu", 100.0, preemption=False)
    assert load_config(ServiceConfig, path).placement is False  # shipped off
    enable_hints(path, "consolidate")
    cfg = load_config(ServiceConfig, path)
    assert cfg.placement is True and cfg.placement_mode == "consolidate"
    # the rest of the replay's config is untouched
    assert cfg.partitions == ["gpu"] and cfg.interval_s == 1.0 and cfg.preemption == "off"
    with pytest.raises(ValueError, match="placement hints mode must be one of"):
        enable_hints(path, "tight")


def test_replay_refuses_an_unknown_placement_hints_mode(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n")
    res = CliRunner().invoke(
        cli_main, ["replay", "--trace", str(trace), "--mode", "service", "--placement-hints", "x"]
    )
    assert res.exit_code == 2
    assert "consolidate" in res.output and "spread" in res.output
