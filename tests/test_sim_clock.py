"""The simulated service's history at Slurm's clock (SimConfig.clock_s): the live service
times each run from Slurm's whole-second StartTime and EndTime, so in a replay at speedup
X its Gittins history knows run lengths to X trace seconds (issue 13, live fidelity)."""

from dataclasses import replace

import pytest

from slurm_ext.policy import PolicyConfig
from slurm_ext.sim.engine import SimConfig, Simulator
from slurm_ext.sim.traces import TraceJob

TRACE = [
    TraceJob(job_id=1, gpus=1, submit_time=0, duration_s=30),  # 0..30: within one tick
    TraceJob(job_id=2, gpus=1, submit_time=0, duration_s=250),  # 0..250: two ticks
    TraceJob(job_id=3, gpus=2, submit_time=250, duration_s=60),  # 250..310: crosses 300
]
CLUSTER = SimConfig(nodes=1, gpus_per_node=2, preemptive=False, restart_overhead_s=0)


def _run(clock_s: float) -> tuple[list[float], dict[int, float]]:
    sim = Simulator(TRACE, PolicyConfig(policy="gittins"), replace(CLUSTER, clock_s=clock_s))
    jobs = sim.run()
    return [c.gpu_s for c in sim.keys.history], {j.id: j.finish for j in jobs}


def test_history_learns_run_lengths_in_whole_ticks_and_jcts_stay_exact():
    exact, finish = _run(0.0)
    assert exact == pytest.approx([30.0, 250.0, 120.0])
    ticked, finish_ticked = _run(100.0)
    # the start's and the end's tick: 0-0, 2-0, 3-2 ticks of 100 s, times the GPUs
    assert ticked == pytest.approx([0.0, 200.0, 200.0])
    assert finish_ticked == finish == pytest.approx({1: 30.0, 2: 250.0, 3: 310.0})


def test_a_negative_clock_is_refused():
    with pytest.raises(ValueError, match="clock_s"):
        replace(CLUSTER, clock_s=-1.0)
