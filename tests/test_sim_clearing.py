"""The simulator's fast preemption paths against the rule itself, on whole runs.

With requeue costs, a cap or jobs that did not opt in (the defaults: costs and a cap are
on), a consolidated job's victims come from the per-node walk
(`NodeClearing.clear_eligible`); `verify_victims` makes every clearing also ask
`choose_victims` on every running job and raise if the two differ, in set or order.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurm_ext.policy import PolicyConfig
from slurm_ext.sim.engine import SimConfig, Simulator
from slurm_ext.sim.synth import synth_jobs
from slurm_ext.sim.timelimits import fill_time_limits


def _wide(jobs):
    return [replace(j, gpus=2 * j.gpus, duration_s=j.duration_s / 2) for j in jobs]


@pytest.mark.parametrize(
    ("policy", "cfg", "cl"),
    [
        ("gittins", {}, {}),  # costs and the cap, as shipped
        ("las", {"max_preemptions": 2, "preemption_cost": False}, {}),
        ("gittins", {"min_run_s": 0.0}, {"preemptible_fraction": 0.5}),
        ("gittins", {}, {"checkpoint_interval_s": 600.0, "cpus_per_node": 48}),
        ("gittins", {}, {"scheduler": "greedy"}),
    ],
)
def test_clearing_walk_picks_what_the_rule_picks(policy, cfg, cl):
    trace = fill_time_limits(_wide(synth_jobs(500, 32, load=1.2, seed=5)), seed=0)
    sim = Simulator(
        trace, PolicyConfig(policy=policy, **cfg), SimConfig(nodes=4, gpus_per_node=8, **cl)
    )
    assert not sim.clearing.all_preemptible  # the walk, not the all-preemptible tables
    sim.preemption.verify_victims = True
    jobs = sim.run()
    assert sim.preemptions > 0 and all(j.finish is not None for j in jobs)


class _AlwaysRetry(Simulator):
    """The same simulator without the no-room cache: every blocked job tries again."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.clearing.may_make_room = lambda job, now: True


@pytest.mark.parametrize(
    ("cfg", "cl"),
    [
        ({}, {}),  # costs: retried once the gain covers a refused requeue
        ({"max_preemptions": 1, "preemption_cost": False}, {"preemptible_fraction": 0.7}),
        ({}, {"checkpoint_interval_s": 300.0, "scheduler": "strict"}),
    ],
)
def test_no_room_cache_changes_no_decision(cfg, cl):
    trace = fill_time_limits(_wide(synth_jobs(600, 32, load=1.2, seed=6)), seed=0)
    runs = []
    for cls in (Simulator, _AlwaysRetry):
        sim = cls(trace, PolicyConfig(policy="gittins", **cfg), SimConfig(nodes=4, **cl))
        jobs = sim.run()
        runs.append(([(j.id, j.first_start, j.finish, j.preemptions) for j in jobs], sim.seq))
    assert runs[0] == runs[1]
    assert sum(p for *_, p in runs[0][0]) > 0
