"""The simulator's heaps drop their stale entries (sim/engine.py `_purge_events`,
sim/keys.py `KeyedQueues.compact_running`) without changing a single decision."""

import pytest

import slurm_ext.sim.engine as engine
import slurm_ext.sim.keys as keys
from slurm_ext.policy import PolicyConfig
from slurm_ext.sim.engine import SimConfig, Simulator
from slurm_ext.sim.synth import synth_jobs
from slurm_ext.sim.timelimits import fill_time_limits


def run(trace, policy, cluster, cap):
    """Every job's decisions, the run's counters, and the largest heaps seen at a pass."""
    most = {"events": 0, "running": 0}

    def on_pass(sim, now):
        most["events"] = max(most["events"], len(sim.state.events))
        most["running"] = max(most["running"], len(sim.keys.running))

    sim = Simulator(trace, policy, cluster, on_pass=on_pass)
    sim.events_cap = sim.keys.running_cap = cap
    jobs = sim.run()
    decisions = [(j.id, j.first_start, j.finish, j.preemptions, j.timed_out) for j in jobs]
    return decisions, (sim.preemptions, sim.timeouts, sim.seq), most


@pytest.mark.parametrize(
    "policy,cluster",
    [
        ("gittins", {"scheduler": "slurm"}),
        ("gittins", {"scheduler": "greedy", "pass_interval_s": 60.0}),
        ("las", {"scheduler": "slurm", "preemptible_fraction": 0.5}),
        ("srtf", {"scheduler": "strict"}),  # continuous keys: the event heap is kept
    ],
)
def test_dropping_stale_entries_changes_no_decision(monkeypatch, policy, cluster):
    trace = fill_time_limits(synth_jobs(600, 32, load=1.3, seed=7), seed=0)
    cfg = PolicyConfig(policy=policy)
    cl = SimConfig(nodes=4, gpus_per_node=8, placement="consolidate", **cluster)
    kept = run(trace, cfg, cl, cap=10**9)  # never purged
    # purged as soon as a heap holds more than 8 entries, or twice its live ones
    monkeypatch.setattr(engine, "EVENTS_MIN", 8)
    monkeypatch.setattr(keys, "RUNNING_MIN", 8)
    purged = run(trace, cfg, cl, cap=8)
    assert purged[0] == kept[0]
    assert purged[1] == kept[1]
    # the purges did happen: the heaps stayed smaller (under continuous keys each pass
    # rebuilds the running heap, and the event heap keeps its stale entries)
    if policy == "srtf":
        assert purged[2] == kept[2]
    else:
        assert purged[2]["running"] < kept[2]["running"]
        assert purged[2]["events"] < kept[2]["events"]
