"""Co-location history: observations into a real SQLite store, predictions out."""

from __future__ import annotations

import sqlite3

import pytest

from slurm_ext.sim.coloc_history import ColocHistory, KindRow, Observation, predict
from slurm_ext.store.db import Store


def obs(name="train-bert", user="ana", **kw):
    return Observation({"name": name, "user": user}, **kw)


def test_history_learns_slowdown_and_power_per_kind(tmp_path):
    """Three runs of train-bert: alone 600 s at 650 W, then shared at speed 0.8 (slowdown
    1 / 0.8 - 1 = 0.25). Time-weighted: a 1200 s run at 0.6 and a 600 s run at 0.9 average
    (720 + 540) / 1800 = 0.7 for the user's kind."""
    store = Store(tmp_path / "s.db")
    h = ColocHistory(store.db)
    for _ in range(3):
        h.record(
            [
                obs(
                    alone_s=600,
                    alone_util=0.9,
                    alone_power_w=650,
                    shared_s=300,
                    shared_util=0.7,
                    shared_power_w=690,
                    shared_speed=0.8,
                )
            ]
        )
    p = h.predict({"name": "train-bert", "user": "ana"})
    assert p is not None
    assert p.slowdown == pytest.approx(0.25) and p.power_w == pytest.approx(650)
    assert "name history, 3 shared runs" in p.source and "3 runs alone" in p.source
    h.record([obs(name="a", user="bo", shared_s=1200, shared_util=0.5, shared_speed=0.6)])
    h.record([obs(name="b", user="bo", shared_s=600, shared_util=0.5, shared_speed=0.9)])
    alone, shared = h.rows("user", "bo")
    assert alone is None and shared.runs == 2 and shared.speed == pytest.approx(0.7)
    # too few runs of a kind: no prediction, the agent keeps its configured values
    assert h.predict({"name": "a", "user": "bo"}) is None
    assert h.predict({"name": "a", "user": "bo"}, min_runs=2).slowdown == pytest.approx(1 / 0.7 - 1)
    store.close()
    # the table survives a reopen (store migrations untouched) and reads read-only
    ro = Store(tmp_path / "s.db", readonly=True)
    assert ColocHistory(ro.db, readonly=True).predict({"name": "train-bert"}).power_w == 650
    ro.close()


def test_read_only_store_without_the_table_predicts_nothing(tmp_path):
    Store(tmp_path / "s.db").close()
    ro = Store(tmp_path / "s.db", readonly=True)
    assert ColocHistory(ro.db, readonly=True).predict({"name": "x"}) is None
    ro.close()


def test_most_specific_kind_wins_and_bad_input_is_refused():
    rows = {
        "model": (None, KindRow(5, 100.0, 0.5, 300.0, 0.95)),
        "user": (KindRow(9, 100.0, 0.5, 420.0, 1.0), KindRow(9, 100.0, 0.5, 300.0, 0.5)),
    }
    p = predict(rows)
    assert p.slowdown == pytest.approx(1 / 0.95 - 1) and p.power_w == 420.0
    assert p.source == "model history, 5 shared runs; user history, 9 runs alone"
    with pytest.raises(ValueError, match="unknown kind"):
        Observation({"account": "x"})
    with pytest.raises(ValueError, match="shared_speed"):
        obs(shared_speed=3.0)
    with pytest.raises(ValueError, match="alone_s"):
        obs(alone_s=-1)


def test_long_keys_are_bounded():
    db = sqlite3.connect(":memory:")
    h = ColocHistory(db)
    h.record([obs(name="x" * 10_000, alone_s=10, alone_power_w=100)])
    (n,) = db.execute("SELECT max(length(key)) FROM coloc_history").fetchone()
    assert n == 256
    assert h.rows("name", "x" * 10_000)[0].power_w == 100
