"""The replay's pure parts: scaling, limits, opt-ins, sbatch shapes, records, metrics, payload."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_ext.core.config import load_config
from slurm_ext.policy import PolicyConfig
from slurm_ext.replay import payload
from slurm_ext.replay.metrics import KEYS, add_ratios, summarize
from slurm_ext.replay.plan import TARGET_WALL_S, PlanError, auto_speedup, plan, sbatch_args, shape
from slurm_ext.replay.records import SqueuePoller, parse_sacct
from slurm_ext.replay.service import scaled_policy, with_requeue_hold, write_config
from slurm_ext.replay.slurmconf import REQUEUE_HOLD_S, replay_conf
from slurm_ext.service.loop import ServiceConfig
from slurm_ext.sim.timelimits import fill_time_limits
from slurm_ext.sim.traces import TraceJob


def _jobs() -> list[TraceJob]:
    return [
        TraceJob(1, 1, 0.0, 600.0),
        TraceJob(2, 8, 120.0, 3000.0, time_limit_s=3000.0),
        TraceJob(3, 6, 240.0, 100.0, checkpoint=True),
    ]


def test_plan_scales_times_and_rounds_limits_up_to_minutes() -> None:
    jobs = plan(_jobs(), 60.0, nodes=2, gpus_per_node=4)
    j1, j2, j3 = jobs
    assert (j2.submit_wall_s, j2.work_wall_s) == (2.0, 50.0)
    assert j2.limit_min == 1  # 3000 trace s / 60 = 50 wall s -> 1 minute
    # the simulator's limits for jobs without one
    filled = {j.job_id: j.time_limit_s for j in fill_time_limits(_jobs(), 0)}
    assert j1.limit_min * 60 >= filled[1] / 60 > (j1.limit_min - 1) * 60
    assert (j2.nodes, j2.gpus_per_node) == (2, 4)
    assert (j3.nodes, j3.gpus_per_node) == (2, 0)  # 6 on 4-GPU nodes: --gpus=6 -N2
    assert not any(j.preemptible for j in jobs)  # only service-requeue opts jobs in


def test_opt_in_is_the_checkpoint_flag_or_a_seeded_draw() -> None:
    base = plan(_jobs(), 10.0, 2, 4, "service-requeue")
    assert [j.preemptible for j in base] == [False, False, True]
    many = [TraceJob(i, 1, 0.0, 60.0) for i in range(400)]
    a = plan(many, 10.0, 2, 4, "service-requeue", preemptible_fraction=0.5, seed=3)
    b = plan(many, 10.0, 2, 4, "service-requeue", preemptible_fraction=0.5, seed=3)
    assert [j.preemptible for j in a] == [j.preemptible for j in b]
    assert 150 < sum(j.preemptible for j in a) < 250


def test_plan_refuses_a_job_wider_than_the_cluster() -> None:
    with pytest.raises(PlanError, match="job 2 asks for 8 GPUs but the cluster has 4"):
        plan(_jobs(), 10.0, 1, 4)
    with pytest.raises(PlanError, match="speedup"):
        plan(_jobs(), 0.5, 2, 4)


def test_sbatch_args_ask_for_gpus_limit_and_requeue() -> None:
    j = plan(_jobs(), 10.0, 2, 4, "service-requeue")
    assert "--gpus=6" in sbatch_args(j[2], "gpu", "/x") and "-N2" in sbatch_args(j[2], "gpu", "/x")
    assert "--gres=gpu:4" in sbatch_args(j[1], "gpu", "/x")
    assert {"--requeue", "--comment=checkpoint=1"} <= set(sbatch_args(j[2], "gpu", "/x"))
    assert "--no-requeue" in sbatch_args(j[0], "gpu", "/x")
    assert "--time=5" in sbatch_args(j[1], "gpu", "/x")  # 3000 / 10 / 60
    assert shape(3, 4) == (1, 3)


def test_auto_speedup_fits_the_estimate_in_the_target_wall_time() -> None:
    assert auto_speedup([TraceJob(1, 1, 0.0, 60.0)], 8) == 1.0  # already short
    long = [TraceJob(i, 1, i * 100.0, 48000.0) for i in range(100)]
    s = auto_speedup(long, 8)
    assert s == pytest.approx((max(9900.0, 100 * 48000.0 / 8) + 48000.0) / TARGET_WALL_S)


def test_parse_sacct_keeps_every_run_of_a_requeued_job() -> None:
    text = (
        "5|REQUEUED|2026-01-01T00:00:00|2026-01-01T00:00:10|2026-01-01T00:00:30|"
        "billing=1,cpu=1,gres/gpu=2,node=1\n"
        "5|COMPLETED|2026-01-01T00:00:31|2026-01-01T00:00:40|2026-01-01T00:01:00|"
        "billing=1,cpu=1,gres/gpu=2,node=1\n"
        "6|TIMEOUT|2026-01-01T00:00:05|2026-01-01T00:00:05|2026-01-01T00:01:05|cpu=1\n"
        "6.batch|COMPLETED|x|x|x|\n"
    )
    recs = parse_sacct(text, {6: 1})
    r5, r6 = recs[5], recs[6]
    assert r5.requeues == 1 and r5.state == "COMPLETED" and r5.gpus == 2
    assert [e - s for s, e in r5.runs] == [20.0, 20.0]
    assert r5.end - r5.submit == 60.0
    assert r6.state == "TIMEOUT" and r6.gpus == 1  # no gres in TRES: the trace's GPUs
    row = summarize(recs.values(), total_gpus=4, speedup=10.0)
    assert set(KEYS) <= set(row)
    assert row["jobs"] == 2 and row["timeouts"] == 1 and row["requeues"] == 1
    assert row["preemptions"] == 1
    assert row["avg_jct_s"] == pytest.approx((600 + 600) / 2)
    assert row["avg_queue_s"] == pytest.approx((600 - 400 + 0) / 2)
    assert row["makespan_s"] == pytest.approx(650.0)
    assert row["gpu_utilization"] == pytest.approx((400 * 2 + 600) / (4 * 650))
    rows = {"slurm": dict(row), "service": dict(row, avg_jct_s=300.0)}
    add_ratios(rows)
    assert rows["service"]["vs_slurm"] == pytest.approx(0.5)


def test_squeue_poller_sees_runs_and_requeues() -> None:
    p = SqueuePoller({7: 4})
    p.update("7|RUNNING|2026-01-01T00:00:00|2026-01-01T00:00:02|2026-01-01T01:00:00", 10.0)
    p.update("7|PENDING|2026-01-01T00:00:00|2026-01-01T00:00:20|2026-01-01T00:00:12", 20.0)
    p.update("7|RUNNING|2026-01-01T00:00:00|2026-01-01T00:00:30|2026-01-01T01:00:00", 40.0)
    p.update("7|COMPLETED|2026-01-01T00:00:00|2026-01-01T00:00:30|2026-01-01T00:00:50", 60.0)
    r = p.records[7]
    assert r.requeues == 1 and r.state == "COMPLETED" and r.gpus == 4
    assert [e - s for s, e in r.runs] == [10.0, 20.0]


def test_service_config_is_scaled_and_loads(tmp_path: Path) -> None:
    path = write_config(tmp_path / "s.toml", "/x/slurm.conf", "gpu", 100.0, preemption=True)
    cfg = load_config(ServiceConfig, path)
    assert cfg.preemption == "requeue" and cfg.partitions == ["gpu"] and cfg.port == 0
    assert cfg.interval_s == 1.0
    base = PolicyConfig()
    assert cfg.policy == scaled_policy(with_requeue_hold(base, 100.0), 100.0)
    assert cfg.policy.min_run_s == base.min_run_s / 100.0
    assert cfg.policy.queue_thresholds_gpu_s[0] == base.queue_thresholds_gpu_s[0] / 100.0
    # every time the requeue cost rule reads is in wall seconds too, and the rule is told
    # how often the replay's jobs checkpoint (unscaled, it assumed 900 wall s: at speedup
    # 1,500 that is 15 days of trace time lost per requeue, and it almost never requeued)
    # the restart cost includes Slurm's hold of a requeued job (cred_expire + 1 wall s)
    assert cfg.policy.preemption_restart_s == base.preemption_restart_s / 100.0 + REQUEUE_HOLD_S
    assert cfg.policy.preemption_checkpoint_s == base.preemption_checkpoint_s / 100.0
    path = write_config(
        tmp_path / "c.toml", "/x/slurm.conf", "gpu", 100.0, True, checkpoint_interval_s=1800.0
    )
    assert load_config(ServiceConfig, path).policy.preemption_checkpoint_s == 18.0


def test_replay_conf_scales_slurm_cycles() -> None:
    conf = replay_conf(1000.0, max_limit_min=12)
    assert "bf_interval=1" in conf and "sched_interval=1" in conf
    assert "bf_window=13" in conf and "bf_resolution=1" in conf
    assert "PriorityMaxAge=11\n" in conf  # 7 days / 1000 = 605 s -> 11 minutes
    assert "bf_resolution=6," in replay_conf(10.0, 1)


def test_payload_resumes_from_its_last_checkpoint(tmp_path: Path) -> None:
    state = tmp_path / "job.ckpt"
    argv = [sys.executable, "-I", payload.__file__, "3.0", "0.5", str(state)]
    proc = subprocess.Popen(argv)
    time.sleep(1.3)  # past two checkpoints (0.5, 1.0), before the third
    proc.kill()  # a requeue: the work after the last checkpoint is lost
    proc.wait()
    assert payload.read_progress(str(state)) == pytest.approx(1.0, abs=0.1)
    t = time.monotonic()
    assert subprocess.run(argv, timeout=30).returncode == 0
    assert 1.7 < time.monotonic() - t < 2.8  # resumed: ~2 s of work left, not 3
    lines = (tmp_path / "job.ckpt.log").read_text().split("\n")
    starts = [float(x.split()[2]) for x in lines if " start " in x]
    assert starts[0] == 0.0 and starts[1] == pytest.approx(1.0, abs=0.1)
    assert lines[-2].endswith(" done")
    assert payload.read_progress(str(state)) == 3.0
