"""Preempt only for a job that could start, and only where it can run (pure).

Live on 22.05 the service requeued a100 jobs for a waiting h100 job and for a job held by
`Dependency`: GPUs freed where nobody waiting could use them. Two a100 nodes (4 GPUs) in
partition a100, two h100 nodes (8 GPUs) in partition h100, every GPU held by a
checkpointing job ranked below the waiting ones.
"""

from __future__ import annotations

import pytest

from slurm_ext.cli.inspect import explain_lines
from slurm_ext.core.model import Cluster, Decision, Job, JobState, Node, Partition
from slurm_ext.policy import (
    PolicyConfig,
    RunningJob,
    WaitingJob,
    choose_victims,
    could_start,
    fits_now,
    no_preemption_note,
    reason_words,
    steady_reason,
    why_no_victims,
)
from slurm_ext.service.steps import plan_placements, plan_preemption, usable_nodes
from slurm_ext.userview.page import render_page
from slurm_ext.userview.rows import Waiting, explain_info, free_gpus, free_gpus_by_pool, node_rows

POLICY = PolicyConfig(policy="fifo", preemption_cost=False, min_run_s=0.0)
A100 = ("a100-1", "a100-2")
H100 = ("h100-1", "h100-2")


def hetero(alloc: dict[str, int] | None = None) -> Cluster:
    """The heterogeneous harness's cluster; `alloc`: GPUs taken per node (default: all)."""
    alloc = alloc if alloc is not None else {n: (4 if n in A100 else 8) for n in A100 + H100}
    nodes = tuple(
        Node(n, gpus=4, gpus_alloc=alloc.get(n, 0), gpu_type="a100", features=("a100", "ib"),
             partitions=("a100",)) for n in A100
    ) + tuple(
        Node(n, gpus=8, gpus_alloc=alloc.get(n, 0), gpu_type="h100", partitions=("h100",))
        for n in H100
    )  # fmt: skip
    parts = (Partition("a100", A100, default=True), Partition("h100", H100))
    return Cluster(nodes=nodes, partitions=parts)


# ---- the reasons -----------------------------------------------------------------------

STARTABLE = ["", "None", "Resources", "Priority", "SchedDefer"]
BLOCKED = [
    "Dependency", "DependencyNeverSatisfied", "JobHeldUser", "JobHeldAdmin", "BeginTime",
    "QOSMaxGRESPerUser", "QOSGrpGRES", "QOSMaxJobsPerUserLimit", "AssocGrpGRES",
    "AssocMaxJobsLimit", "ReqNodeNotAvail", "PartitionDown", "PartitionInactive",
    "PartitionNodeLimit", "PartitionTimeLimit", "Reservation", "Licenses", "NodeDown",
    "MaxGRESPerAccount", "JobHoldMaxRequeue", "Cleaning", "InvalidQOS",
]  # fmt: skip


@pytest.mark.parametrize("reason", STARTABLE)
def test_a_job_waiting_for_resources_or_priority_could_start(reason: str) -> None:
    assert could_start(reason) and no_preemption_note(reason) == ""
    assert could_start(None)  # a simulated job without a reason


@pytest.mark.parametrize("reason", BLOCKED)
def test_a_job_held_by_anything_else_could_not(reason: str) -> None:
    assert not could_start(reason)
    note = no_preemption_note(reason)
    assert note.endswith(": no job is requeued for it") and "Slurm reason" not in note


def test_the_reasons_in_words() -> None:
    assert no_preemption_note("Dependency") == "waits on a dependency: no job is requeued for it"
    assert reason_words("QOSMaxGRESPerUser") == "is over a QOS limit"
    assert reason_words("AssocGrpGRES") == "is over an association limit"
    assert reason_words("ReqNodeNotAvail") == "asks for nodes that are not available"
    assert reason_words("Resources").startswith("waits for free GPUs")
    assert reason_words("SomethingNew") == "waits (Slurm reason SomethingNew)"
    assert not could_start("SomethingNew")  # unknown: not preempted for


# ---- the nodes a job may use --------------------------------------------------------


def test_usable_nodes_follow_partitions_type_and_node_lists() -> None:
    c = hetero()
    assert usable_nodes(Job(1, partition="h100"), c) == frozenset(H100)
    assert usable_nodes(Job(1, partition="a100,h100"), c) == frozenset(A100 + H100)
    assert usable_nodes(Job(1, partition="a100,h100", gpu_type="h100"), c) == frozenset(H100)
    assert usable_nodes(Job(1, partition="a100,h100", gpus_per_node=6), c) == frozenset(H100)
    excl = Job(1, partition="h100", excluded_nodes=("h100-1",))
    assert usable_nodes(excl, c) == {"h100-2"}
    assert usable_nodes(excl, c, own_lists=True) == frozenset(H100)  # the service's hint
    req = Job(1, partition="a100,h100", required_nodes=("a100-2",))
    assert usable_nodes(req, c) == {"a100-2"}
    # no description, or one that does not know the partition: any node, as before
    assert usable_nodes(Job(1, partition="h100"), None) is None
    assert usable_nodes(Job(1, partition="new"), c) is None


# ---- victims only where it can run ------------------------------------------------------


def running(job_id: int, node: str, gpus: int) -> RunningJob:
    return RunningJob(job_id, ((node, gpus),), True, 100.0)


FULL = {"a100-1": 0, "a100-2": 0, "h100-1": 0, "h100-2": 0}
# worst first: the a100 jobs are the worst-ranked
BELOW = [running(11, "a100-1", 4), running(12, "a100-2", 4)]
BELOW += [running(21, "h100-1", 4), running(22, "h100-1", 4), running(23, "h100-2", 8)]


@pytest.mark.parametrize("consolidate", [False, True])
def test_victims_only_on_the_nodes_it_may_use(consolidate: bool) -> None:
    any_node = WaitingJob(1, 4, consolidate)
    assert choose_victims(any_node, BELOW, FULL, 8) == [11]  # the worst, an a100 job
    on_h100 = WaitingJob(1, 4, consolidate, nodes=frozenset(H100))
    assert choose_victims(on_h100, BELOW, FULL, 8) == [21]  # as many as it needs there
    wide = WaitingJob(1, 8, consolidate, nodes=frozenset(H100))
    assert choose_victims(wide, BELOW, FULL, 8) == [21, 22]  # one node cleared
    nowhere = WaitingJob(1, 4, consolidate, nodes=frozenset(H100))
    assert choose_victims(nowhere, BELOW[:2], FULL, 8) == []  # only a100 jobs run
    assert "no running job ranked below it holds GPUs" in why_no_victims(nowhere, BELOW[:2], 0.0)


def test_free_gpus_elsewhere_do_not_make_it_fit() -> None:
    free = dict(FULL, **{"a100-1": 4})
    assert fits_now(WaitingJob(1, 4, False), free, 8)
    on_h100 = WaitingJob(1, 4, False, nodes=frozenset(H100))
    assert not fits_now(on_h100, free, 8)
    assert choose_victims(on_h100, BELOW, free, 8) == [21]


def test_the_notes_name_the_rule_that_left_no_candidate() -> None:
    w = WaitingJob(1, 4, False, gain_gpu_s=10.0, nodes=frozenset(H100))
    young = [RunningJob(21, (("h100-1", 8),), True, 5.0)]
    assert "min_run_s (60 s)" in why_no_victims(w, young, 60.0)
    plain = [RunningJob(21, (("h100-1", 8),), False, 500.0)]
    assert "checkpoints" in why_no_victims(w, plain, 0.0)
    costly = [RunningJob(21, (("h100-1", 8),), True, 500.0, lost_gpu_s=99.0)]
    assert "the cost rule" in why_no_victims(w, costly, 0.0)
    assert choose_victims(w, costly, FULL, 8) == []


# ---- the service's plan ---------------------------------------------------------------


def _snapshot(waiting: list[Job]) -> tuple[list[Decision], dict[int, Job]]:
    """`waiting` first (in that order), then the running jobs, worst last: the a100 ones."""
    run = [
        Job(23, partition="h100", state=JobState.RUNNING, gpus=8, nodes=("h100-2",)),
        Job(21, partition="h100", state=JobState.RUNNING, gpus=8, nodes=("h100-1",)),
        Job(12, partition="a100", state=JobState.RUNNING, gpus=4, nodes=("a100-2",)),
        Job(11, partition="a100", state=JobState.RUNNING, gpus=4, nodes=("a100-1",)),
    ]
    run = [Job(**{**j.__dict__, "requeue": True, "comment": "checkpoint=1"}) for j in run]
    jobs = waiting + run
    return [Decision(j.job_id, r) for r, j in enumerate(jobs)], {j.job_id: j for j in jobs}


def plan(waiting: list[Job], cluster: Cluster | None):
    decisions, by_id = _snapshot(waiting)
    nodes = list((cluster or hetero()).nodes)
    return plan_preemption(decisions, by_id, nodes, set(), 1000.0, POLICY, "spread", cluster)


@pytest.mark.parametrize("reason", ["Dependency", "QOSMaxGRESPerUser", "BeginTime"])
def test_a_blocked_best_job_is_passed_over_for_the_next_startable(reason: str) -> None:
    blocked = Job(1, partition="a100", gpus=4, reason=reason)
    assert plan([blocked], hetero()).top is None  # nobody to preempt for
    nxt = Job(2, partition="a100", gpus=4, reason="Priority")
    got = plan([blocked, nxt], hetero())
    assert (got.top, got.victims) == (2, [11])


def test_an_h100_job_never_gets_an_a100_job_requeued() -> None:
    waiting = Job(1, partition="h100", gpus=4, reason="Resources")
    assert plan([waiting], None).victims == [11]  # without the description: the old thrash
    got = plan([waiting], hetero())
    assert (got.top, got.victims, got.note) == (1, [21], "")
    # only a100 jobs may go (the h100 ones are not checkpointing): nobody, and why
    decisions, by_id = _snapshot([waiting])
    for j in (21, 23):
        by_id[j] = Job(**{**by_id[j].__dict__, "comment": ""})
    c = hetero()
    got = plan_preemption(decisions, by_id, list(c.nodes), set(), 1000.0, POLICY, "spread", c)
    assert got.victims == [] and "checkpoints" in got.note


def test_a_job_in_two_partitions_takes_the_worst_of_either() -> None:
    waiting = Job(1, partition="a100,h100", gpus=4, reason="Resources")
    assert plan([waiting], hetero()).victims == [11]
    typed = Job(1, partition="a100,h100", gpus=4, gpu_type="h100", reason="Resources")
    assert plan([typed], hetero()).victims == [21]


def test_placement_hints_stay_in_the_jobs_partition_and_type() -> None:
    c = hetero({"a100-1": 2, "h100-1": 6, "h100-2": 8})  # a100-2 idle: the best fit for 2
    jobs = [
        Job(1, partition="h100", gpus=2, reason="Resources"),
        Job(2, partition="a100,h100", gpus=2, gpu_type="h100", reason="Resources"),
        Job(3, partition="a100", gpus=2, reason="Resources"),
    ]
    anywhere = plan_placements(jobs, list(c.nodes), "consolidate")
    assert anywhere[1] == ("a100-1",)  # without the description: an a100 node
    hints = plan_placements(jobs, list(c.nodes), "consolidate", c)
    assert hints == {1: ("h100-1",), 2: None, 3: ("a100-1",)}  # 2: h100-1 taken by job 1


# ---- what the service and the user view say ----------------------------------------


def test_free_and_fragmented_gpus_per_partition_and_type() -> None:
    c = hetero({"a100-1": 2, "a100-2": 4, "h100-1": 0, "h100-2": 8})
    waiting = [Waiting("a100", None, 4), Waiting("h100", "h100", 8)]
    pools = {(p["partition"], p["gpu_type"]): p for p in free_gpus_by_pool(c.nodes, waiting)}
    # a100: 2 free on a node that cannot take the 4-GPU a100 job; h100: one idle node
    assert pools["a100", "a100"] == {
        "partition": "a100", "gpu_type": "a100", "free": 2, "widest_waiting": 4,
        "stranded": 2, "fragmentation": 1.0,
    }  # fmt: skip
    assert pools["h100", "h100"]["free"] == 8 and pools["h100", "h100"]["stranded"] == 0
    # pooled, the 8-GPU h100 job made the a100 GPUs look stranded and the h100 ones not
    assert free_gpus(c.nodes, [4, 8]).stranded == 2
    rows = node_rows(c.nodes)
    assert [(r["node"], r["partitions"], r["gpu_type"]) for r in rows][::3] == [
        ("a100-1", "a100", "a100"),
        ("h100-2", "h100", "h100"),
    ]
    page = render_page([], rows, free_gpus(c.nodes, [4, 8]), None, 0.0, 10, "full",
                       list(pools.values())).decode()  # fmt: skip
    assert "a100 / a100: 2 free, 2 on nodes that cannot take" in page


def test_explain_says_why_it_waits_and_that_nobody_is_requeued_for_it() -> None:
    info = explain_info(7, None, None, False, 0.0, slurm_state="PENDING",
                        slurm_reason="Dependency", policy_reason=no_preemption_note("Dependency"))  # fmt: skip
    text = "\n".join(explain_lines(7, info))
    assert "Slurm: it waits on a dependency" in text
    assert "waits on a dependency: no job is requeued for it" in text


def test_a_blocked_job_stays_blocked_while_slurm_reads_none_after_a_priority_write() -> None:
    """22.05, live: `Dependency`, then `None` once the service wrote its priority, then
    `Dependency` again at Slurm's next scheduling cycle."""
    assert steady_reason("None", "Dependency") == "Dependency"
    assert steady_reason("", "QOSMaxGRESPerUser") == "QOSMaxGRESPerUser"
    assert steady_reason("Resources", "Dependency") == "Resources"  # Slurm says otherwise
    assert steady_reason("None", None) == "None"  # never seen blocked: startable
