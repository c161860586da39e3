"""A waiting job that must sit on its minimum nodes (`-N`) gets a node cleared for it:
the simulator's preemption rule reads the job's own consolidation, as the live service
does for a per-node request (`policy.placement.asks_fewest_nodes`), so its victims free
room where Slurm will start it."""

from __future__ import annotations

from slurm_ext.policy import PolicyConfig
from slurm_ext.sim.engine import SimConfig, Simulator
from slurm_ext.sim.traces import TraceJob

# LAS: a running job past 1 s of run leaves queue 0, so a new job outranks it; FIFO
# inside a queue, so the latest submit is the worst-ranked
LAS = PolicyConfig(policy="las", min_run_s=0, preemption_cost=False, queue_thresholds_gpu_s=[1.0])


def _run(trace: list[TraceJob]) -> tuple[dict[int, float | None], int]:
    cl = SimConfig(nodes=2, gpus_per_node=4, restart_overhead_s=0.0)
    sim = Simulator(trace, LAS, cl)
    return {j.id: j.first_start for j in sim.run()}, sim.preemptions


def test_a_node_is_cleared_though_free_gpus_alone_would_be_enough():
    """Two 3-GPU jobs, one per node: 2 GPUs free, one on each. A 2-GPU job that must sit
    on one node: the node-clearing rule requeues one of them and it starts at once."""
    trace = [
        TraceJob(job_id=1, gpus=3, submit_time=0, duration_s=1000),
        TraceJob(job_id=2, gpus=3, submit_time=0, duration_s=1000),
        TraceJob(job_id=3, gpus=2, submit_time=10, duration_s=20),
    ]
    starts, requeues = _run(trace)
    assert starts[3] == 10.0 and requeues >= 1


def test_a_whole_node_job_starts_on_the_node_its_victims_free():
    """n0: jobs 1 (2 GPUs) and 4 (1 GPU, the worst-ranked), n1: job 3 (2 GPUs); 3 GPUs
    free. A 4-GPU job needs a whole node: the clearing rule frees one and it starts at
    once."""
    trace = [
        TraceJob(job_id=1, gpus=2, submit_time=0, duration_s=1000),
        TraceJob(job_id=2, gpus=2, submit_time=0, duration_s=5),  # leaves n0 half free
        TraceJob(job_id=3, gpus=2, submit_time=0, duration_s=1000),
        TraceJob(job_id=4, gpus=1, submit_time=6, duration_s=1000),
        TraceJob(job_id=5, gpus=4, submit_time=10, duration_s=20),
    ]
    starts, requeues = _run(trace)
    assert starts[5] == 10.0 and requeues >= 1
