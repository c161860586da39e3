"""`SimConfig.spread_victims`: the live service's victim choice for a job it reads as free
to spread (its placement mode "profile" without a network-sensitive hint: a replay's
jobs), while Slurm starts the job only on its minimum nodes (`-N`). Found in the kept
requeue replays (docs/benchmarks.md, Session 9): live, the service requeued jobs that
did not give the waiting job a node, backfill put other jobs in the freed GPUs, and the
service requeued those on its next pass."""

from __future__ import annotations

import pytest

from slurm_ext.policy import PolicyConfig
from slurm_ext.sim.engine import SimConfig, Simulator
from slurm_ext.sim.traces import TraceJob

# LAS: a running job past 1 s of run leaves queue 0, so a new job outranks it; FIFO
# inside a queue, so the latest submit is the worst-ranked
LAS = PolicyConfig(policy="las", min_run_s=0, preemption_cost=False, queue_thresholds_gpu_s=[1.0])


def _run(trace: list[TraceJob], spread: bool) -> tuple[dict[int, float | None], int]:
    cl = SimConfig(nodes=2, gpus_per_node=4, restart_overhead_s=0.0, spread_victims=spread)
    sim = Simulator(trace, LAS, cl)
    return {j.id: j.first_start for j in sim.run()}, sim.preemptions


def test_room_in_free_gpus_alone_requeues_nobody():
    """Two 3-GPU jobs, one per node: 2 GPUs free, one on each. A 2-GPU job that must sit
    on one node: the node-clearing rule requeues one of them and it starts at once; read
    as free to spread it fits already, so nobody goes and it waits for an end."""
    trace = [
        TraceJob(job_id=1, gpus=3, submit_time=0, duration_s=1000),
        TraceJob(job_id=2, gpus=3, submit_time=0, duration_s=1000),
        TraceJob(job_id=3, gpus=2, submit_time=10, duration_s=20),
    ]
    starts, requeues = _run(trace, spread=False)
    assert starts[3] == 10.0 and requeues >= 1
    starts, requeues = _run(trace, spread=True)
    assert (starts[3], requeues) == (1000.0, 0)


def test_a_spread_choice_can_requeue_without_making_room():
    """n0: jobs 1 (2 GPUs) and 4 (1 GPU, the worst-ranked), n1: job 3 (2 GPUs); 3 GPUs
    free. A 4-GPU job needs a whole node: the clearing rule frees one and it starts at
    once. Read as free to spread it needs one more GPU: job 4 goes, 4 GPUs are free, two
    on each node, and it still waits (the live thrash); job 4 is back on a freed GPU."""
    trace = [
        TraceJob(job_id=1, gpus=2, submit_time=0, duration_s=1000),
        TraceJob(job_id=2, gpus=2, submit_time=0, duration_s=5),  # leaves n0 half free
        TraceJob(job_id=3, gpus=2, submit_time=0, duration_s=1000),
        TraceJob(job_id=4, gpus=1, submit_time=6, duration_s=1000),
        TraceJob(job_id=5, gpus=4, submit_time=10, duration_s=20),
    ]
    starts, requeues = _run(trace, spread=False)
    assert starts[5] == 10.0 and requeues >= 1
    starts, requeues = _run(trace, spread=True)
    assert requeues >= 1
    assert starts[5] == pytest.approx(1000.0)  # only when job 1 or 3 ends


def test_off_by_default():
    assert SimConfig().spread_victims is False
