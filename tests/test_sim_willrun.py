"""cons_tres's will-run batches in the simulator's backfill (`sim.willrun`): the batch
rule, the node choice among the freed nodes (consecutive best fit), the start it
reports, and what it changes in a backfill pass on a hand-built cluster state."""

import pytest

from slurm_ext.policy import PolicyConfig
from slurm_ext.sim.backfill import BackfillParams, Candidate, Profile, backfill_pass
from slurm_ext.sim.engine import SimConfig, Simulator
from slurm_ext.sim.synth import synth_jobs
from slurm_ext.sim.timelimits import fill_time_limits
from slurm_ext.sim.willrun import batch_ends, willrun_start

INF = float("inf")


def test_batches_align_on_the_window_then_double():
    # first end 100 -> aligned 120; batches reach 150, 180, 240, 360, 600, 1080: the one
    # to 180 and the one to 360 add no end and are skipped
    assert list(batch_ends([100, 130, 200, 400, 1000], 30)) == [130, 200, 400, 1000]
    # an end on a multiple moves up a whole window: 120 -> 150, the first batch to 180
    assert list(batch_ends([120, 175, 185], 30)) == [175, 185]
    # a wide window takes everything in one batch
    assert list(batch_ends([100, 130, 200, 400, 1000], 45_000)) == [1000]
    assert list(batch_ends([], 30)) == [] and list(batch_ends([5.0], 0)) == []


def test_a_tiny_window_tests_after_each_end_while_the_gaps_grow():
    assert list(batch_ends([100, 160, 280], 1e-3)) == [100, 160, 280]


def _four_nodes():
    """4 nodes x 4 GPUs, full; their jobs' limits end at n0 1200, n1 1800, n2 600, n3 660."""
    ends = {"n0": [(1200.0, 4)], "n1": [(1800.0, 4)], "n2": [(600.0, 4)], "n3": [(660.0, 4)]}
    return Profile(0.0, dict.fromkeys(ends, 0), ends)


def test_the_batch_picks_among_all_freed_nodes_and_starts_at_their_last_end():
    wide = Candidate(1, 8, True, 3000.0)  # two whole nodes
    p = _four_nodes()
    exact = p.earliest(wide, 4, 3000.0, INF)
    assert exact == (660.0, [("n2", 4), ("n3", 4)])
    # window 600: aligned 1200, the first batch reaches 1800 and frees every node: one
    # run of four, its first two nodes n0 and n1, whose last end is 1800
    assert willrun_start(p, wide, 4, 3000.0, INF, 600.0, exact[0]) == (
        1800.0,
        [("n0", 4), ("n1", 4)],
    )
    # a tiny window tests after 600 (one node), then after 660: today's plan
    assert willrun_start(p, wide, 4, 3000.0, INF, 1e-3, exact[0]) == exact


def test_the_reported_start_is_the_last_end_on_the_chosen_node_not_the_batch_end():
    ends = {"n0": [(900.0, 4)], "n1": [(600.0, 4)], "n2": [(1500.0, 4)]}
    p = Profile(0.0, dict.fromkeys(ends, 0), ends)
    one = Candidate(1, 4, True, 600.0)
    assert p.earliest(one, 4, 600.0, INF) == (600.0, [("n1", 4)])
    # window 600: aligned 1200, the batch to 1800 ends at 1500; n0 comes first, free
    # since 900
    assert willrun_start(p, one, 4, 600.0, INF, 600.0, 600.0) == (900.0, [("n0", 4)])
    # Slurm 22.05 (the replay's) reports the end of the batch's last job, wherever it ran
    assert willrun_start(p, one, 4, 600.0, INF, 600.0, 600.0, batch_start=True) == (
        1500.0,
        [("n0", 4)],
    )
    # no batch before `before`: no reservation
    assert willrun_start(p, one, 4, 600.0, 1000.0, 600.0, 600.0) == (INF, [])


def test_node_choice_is_cons_tres_consecutive_best_fit():
    # a one-node job goes to the tightest node that holds it (exact: the first)
    ends = {"n0": [(600.0, 4)], "n1": [(600.0, 2), (5000.0, 2)]}
    p = Profile(0.0, dict.fromkeys(ends, 0), ends)
    two = Candidate(1, 2, True, 1000.0)
    assert p.earliest(two, 4, 1000.0, INF) == (600.0, [("n0", 2)])
    assert willrun_start(p, two, 4, 1000.0, INF, 1e-3, 600.0) == (600.0, [("n1", 2)])
    # a two-node job takes a run of consecutive nodes: n1 (busy to 5000) splits n0 from
    # n2-n3, so n2 and n3 (exact: the first two free, n0 and n2)
    ends = {"n0": [(600.0, 4)], "n1": [(5000.0, 4)], "n2": [(600.0, 4)], "n3": [(600.0, 4)]}
    p = Profile(0.0, dict.fromkeys(ends, 0), ends)
    wide = Candidate(2, 8, True, 1000.0)
    assert p.earliest(wide, 4, 1000.0, INF) == (600.0, [("n0", 4), ("n2", 4)])
    assert willrun_start(p, wide, 4, 1000.0, INF, 1e-3, 600.0) == (600.0, [("n2", 4), ("n3", 4)])


def _pass(window):
    """The four-node state with 2 GPUs of n2's free now: a blocked 8-GPU job ranked
    first, then a 2-GPU job whose limit (1000 s) outlasts n2's running job (600)."""
    ends = {"n0": [(1200.0, 4)], "n1": [(1800.0, 4)], "n2": [(600.0, 2)], "n3": [(660.0, 4)]}
    free = {"n0": 0, "n1": 0, "n2": 2, "n3": 0}
    reserved = []
    started = backfill_pass(
        0.0,
        [Candidate(1, 8, True, 3000.0), Candidate(2, 2, True, 1000.0)],
        free,
        ends.__getitem__,
        4,
        BackfillParams(willrun_window_s=window),
        on_reserve=lambda j, t: reserved.append((j, t)),
    )
    return started, reserved


def test_the_window_moves_the_wide_reservation_and_lets_a_job_through():
    # exact: the wide job holds n2 and n3 from 660, so the 2-GPU job cannot start on n2
    assert _pass(0.0) == ([], [(1, 660.0)])
    # cons_tres's batch (window 600 s, 20 wall s x 30) plans it on n0 and n1 from 1800:
    # n2 is not reserved and the 2-GPU job starts now
    assert _pass(600.0) == ([(2, [("n2", 2)])], [(1, 1800.0)])
    # a tiny window plans as the exact search does
    assert _pass(1e-3) == _pass(0.0)


def test_window_zero_is_the_default_and_changes_nothing():
    assert SimConfig().bf_willrun_window_s == 0.0
    trace = fill_time_limits(synth_jobs(120, 16, load=1.2, seed=4), 4)
    base = dict(nodes=4, gpus_per_node=4, preemptive=False)
    fifo = PolicyConfig(policy="fifo")
    a = Simulator(trace, fifo, SimConfig(**base)).run()
    b = Simulator(trace, fifo, SimConfig(**base, bf_willrun_window_s=0.0)).run()
    assert [j.first_start for j in a] == [j.first_start for j in b]
    # a window of 30 x 1,500 (a replay's) plans otherwise on this trace
    c = Simulator(trace, fifo, SimConfig(**base, bf_willrun_window_s=45_000.0)).run()
    assert [j.first_start for j in c] != [j.first_start for j in a]


def test_a_bad_window_or_start_rule_is_refused():
    with pytest.raises(ValueError, match="bf_willrun_window_s"):
        SimConfig(bf_willrun_window_s=-1.0)
    with pytest.raises(ValueError, match="bf_willrun_start must be one of nodes, batch"):
        SimConfig(bf_willrun_start="last")
    with pytest.raises(ValueError, match="backfill parameters"):
        BackfillParams(willrun_window_s=-1.0)
