"""Victims for a job that asks its GPUs per node (issue 13, the requeue thrash, session 9).

Seen in the kept live replays: in placement mode "profile" the service read a waiting
`-N1 --gres=gpu:3` job as free to spread (no network-sensitive hint), requeued the
worst-ranked job wherever it ran, the job still found no node with 3 free GPUs, backfill
put another job on the freed GPU, and the next pass requeued that one: six requeues for
one start. Slurm starts a per-node request only on its nodes, so the victims must clear
one of them, as the simulator does for a job that must consolidate.
"""

from __future__ import annotations

import pytest

from slurm_ext.core.model import Decision, Job, JobState, Node
from slurm_ext.policy import (
    PolicyConfig,
    RunningJob,
    WaitingJob,
    asks_fewest_nodes,
    choose_victims,
    consolidate_for,
)
from slurm_ext.service.loop import preemption_victims

POLICY = PolicyConfig(policy="fifo", preemption_cost=False, min_run_s=0.0)
NODES = [Node("n1", gpus=4, gpus_alloc=4), Node("n2", gpus=4, gpus_alloc=2)]


def _running(job_id: int, node: str, submit: float) -> Job:
    return Job(
        job_id=job_id,
        state=JobState.RUNNING,
        gpus=2,
        gpus_per_node=2,
        submit_time=submit,
        start_time=100.0,
        nodes=(node,),
        requeue=True,
        comment="checkpoint=1",
    )


def _snapshot(gpus_per_node: int) -> tuple[list[Decision], dict[int, Job]]:
    """n1: jobs 11 and 12 (2 GPUs each), n2: job 21 (2 GPUs) and 2 GPUs free; job 5 waits
    for 3 GPUs. FIFO: 5 first, then 21, 11, 12 (the worst)."""
    waiting = Job(job_id=5, gpus=3, gpus_per_node=gpus_per_node, submit_time=0.0)
    by_id = {
        5: waiting,
        21: _running(21, "n2", 10.0),
        11: _running(11, "n1", 20.0),
        12: _running(12, "n1", 30.0),
    }
    decisions = [Decision(job_id=i, rank=r) for r, i in enumerate([5, 21, 11, 12])]
    return decisions, by_id


@pytest.mark.parametrize("mode", ["profile", "spread", "consolidate"])
def test_a_per_node_request_gets_a_node_cleared_in_every_mode(mode):
    decisions, by_id = _snapshot(gpus_per_node=3)
    top, victims = preemption_victims(decisions, by_id, NODES, set(), 1000.0, POLICY, mode)
    # job 12 alone would leave 2 + 2 free GPUs on two nodes: no room for -N1 gpu:3
    assert (top, victims) == (5, [12, 11])


@pytest.mark.parametrize(("mode", "expected"), [("profile", [12]), ("consolidate", [12, 11])])
def test_a_per_job_request_still_follows_the_placement_mode(mode, expected):
    decisions, by_id = _snapshot(gpus_per_node=0)  # --gpus=3: the service may spread it
    assert preemption_victims(decisions, by_id, NODES, set(), 1000.0, POLICY, mode) == (
        5,
        expected,
    )


def test_the_simulators_rule_for_a_job_that_must_consolidate_picks_the_same():
    """The simulator calls `choose_victims` with `SimJob.must_consolidate`; a per-node
    request is the service's way of knowing the same."""
    below = [
        RunningJob(12, (("n1", 2),), True, 900.0),
        RunningJob(11, (("n1", 2),), True, 900.0),
        RunningJob(21, (("n2", 2),), True, 900.0),
    ]
    free = {"n1": 0, "n2": 2}
    assert choose_victims(WaitingJob(5, 3, True), below, free, 4) == [12, 11]
    assert choose_victims(WaitingJob(5, 3, False), below, free, 4) == [12]


@pytest.mark.parametrize(
    ("gpus", "per_node", "nodes", "capacity", "bound"),
    [
        (3, 3, 1, 4, True),  # -N1 --gres=gpu:3
        (8, 4, 2, 4, True),  # -N2 --gres=gpu:4: two whole nodes
        (3, 0, 1, 4, False),  # --gpus=3: per job, may be spread
        (4, 2, 2, 4, False),  # -N2 --gres=gpu:2: not the fewest nodes
        (0, 0, 1, 4, False),  # no GPUs
    ],
)
def test_which_requests_bind_a_job_to_the_fewest_nodes(gpus, per_node, nodes, capacity, bound):
    assert asks_fewest_nodes(gpus, per_node, nodes, capacity) is bound
    assert consolidate_for("spread", False, bound) is bound
