"""The service keeps each completed job's kind (store schema 3+, sacct) and ranks by the
conditioned Gittins tables exactly as the simulator does. Real SQLite, no Slurm."""

from __future__ import annotations

from conftest import old_store

from slurm_ext.core.model import Completed, Job, JobState, Node
from slurm_ext.policy import PolicyConfig, build_table, rank
from slurm_ext.service.fold import fold_jobs
from slurm_ext.service.loop import Service, ServiceConfig, job_view, with_kinds
from slurm_ext.sim.engine import SimConfig, Simulator
from slurm_ext.store.db import Store
from slurm_ext.store.schema import MIGRATIONS, SCHEMA_VERSION
from slurm_ext.testing.snapshot_client import ReplayClient


def _job(job_id: int, state: str, **kw) -> Job:
    kw.setdefault("gpus", 1)
    return Job(job_id=job_id, state=JobState(state), submit_time=100.0 + job_id, **kw)


def test_a_version_2_store_gains_the_kind_columns(tmp_path):
    store = old_store(
        tmp_path / "old.db", 2, "INSERT INTO completions VALUES (4, 50.0, 25.0, 1000.0, 'service')"
    )
    assert store.schema_version == SCHEMA_VERSION == len(MIGRATIONS) >= 3
    assert store.history_kinds(10) == [Completed(2, 50.0)]  # kind unknown, row kept
    store.save_jobs([], [(5, 300.0, 100.0, 1100.0, "alice", "train", "ml", 7200.0)])
    store.add_completions([(6, 40.0, 40.0, 1200.0, "bob", "eval", "", None)], "sacct")
    store.add_completions([(7, 10.0, 10.0, 1300.0)], "sacct")  # old-style row
    assert store.history_kinds(10) == [
        Completed(2, 50.0),
        Completed(3, 300.0, "alice", "train", "ml", 7200.0),
        Completed(1, 40.0, "bob", "eval", "", None),
        Completed(1, 10.0),
    ]
    assert store.history_kinds(2) == [Completed(1, 40.0, "bob", "eval"), Completed(1, 10.0)]
    assert store.history(10)[0] == (1, 10.0)  # the old reader is unchanged
    store.close()


def test_completions_take_their_kind_from_the_snapshot_or_the_record():
    jobs = [_job(1, "RUNNING", start_time=100.0, user="alice", name="train", account="ml",
                 time_limit_s=3600.0)]  # fmt: skip
    recs, _ = fold_jobs({}, jobs, now=100.0)
    done = [_job(1, "COMPLETED", start_time=100.0, end_time=400.0, user="alice", name="train",
                 account="ml", time_limit_s=3600.0)]  # fmt: skip
    recs2, completions = fold_jobs(recs, done, now=500.0)
    assert with_kinds(completions, done, recs2) == [
        (1, 300.0, 300.0, 400.0, "alice", "train", "ml", 3600.0, 1)
    ]
    # gone from Slurm: the record keeps user and name, not account or limit
    recs, _ = fold_jobs(recs, jobs, now=300.0)
    recs3, gone = fold_jobs(recs, [], now=500.0)
    assert with_kinds(gone, [], recs3) == [(1, 200.0, 200.0, 300.0, "alice", "train", "", None, 1)]


def test_a_zero_second_run_keeps_its_gpus_in_the_history(tmp_path):
    # Slurm timed the run at 0 s (start and end in the same second): GPU-s / run s gives
    # no GPU count, so the completion stores it; the simulator's history has it too
    pending = [_job(3, "PENDING", gpus=4, user="alice", name="probe")]
    recs, _ = fold_jobs({}, pending, now=100.0)
    done = [_job(3, "COMPLETED", gpus=4, start_time=200.0, end_time=200.0, user="alice",
                 name="probe")]  # fmt: skip
    recs, completions = fold_jobs(recs, done, now=210.0)
    assert [c[1:3] for c in completions] == [(0.0, 0.0)]
    store = Store(tmp_path / "s.db")
    store.save_jobs(recs.values(), with_kinds(completions, done, recs))
    assert store.history_kinds(10) == [Completed(4, 0.0, "alice", "probe", "", None)]
    assert store.history(10) == [(4, 0.0)]
    store.close()


def test_a_version_6_store_reads_old_completions_by_their_ratio(tmp_path):
    store = old_store(
        tmp_path / "old.db",
        6,
        "INSERT INTO completions (job_id, gpu_s, run_s, end_time, source) VALUES"
        " (1, 80.0, 20.0, 1000.0, 'service'), (2, 0.0, 0.0, 1001.0, 'service')",
    )
    assert store.schema_version == SCHEMA_VERSION
    store.add_completions([(3, 0.0, 0.0, 1002.0, "bob", "x", "", None, 8)], "sacct")
    assert store.history(10) == [(8, 0.0), (None, 0.0), (4, 80.0)]
    store.close()


def test_service_ranks_by_kind_tables_from_its_store_as_the_simulator(tmp_path):
    # alice/train finished fast three times, bob/sim slowly: a fresh alice/train job goes
    # first though bob's was submitted earlier
    done = [Completed(1, 120.0 + i, "alice", "train", "", 3600.0) for i in range(3)]
    done += [Completed(1, 9000.0 + i, "bob", "sim", "", 86400.0) for i in range(3)]
    policy = PolicyConfig(
        queue_thresholds_gpu_s=[1e6],
        min_run_s=0,
        gittins_kind_min_samples=3,
        gittins_classes="pooled",
    )
    store = Store(tmp_path / "s.db")
    rows = [(i, c.gpu_s, c.gpu_s, 1000.0 + i, c.user, c.name, c.account, c.time_limit_s)
            for i, c in enumerate(done)]  # fmt: skip
    store.save_jobs([], rows)
    jobs = [
        _job(11, "PENDING", user="bob", name="sim", time_limit_s=86400.0),
        _job(12, "PENDING", user="alice", name="train", time_limit_s=3600.0),
        _job(13, "PENDING", user="carol", name="new"),
    ]
    nodes = [Node("g1", state="IDLE", cpus=64, gpus=8)]
    cfg = ServiceConfig(store=str(tmp_path / "s.db"), port=0, history_source="store", policy=policy)
    res = Service(cfg, ReplayClient(jobs, nodes), store).run_pass(2000.0)
    assert [d.job_id for d in res.decisions] == [12, 13, 11]
    groups = {d.job_id: (d.group, d.group_samples) for d in res.decisions}
    assert groups == {
        12: ("user=alice,name=train", 3),
        11: ("user=bob,name=sim", 3),
        13: ("pooled", 6),
    }
    # the simulator, given the same history and the same (non-preemptive) setting, builds
    # the same tables and ranks the same views identically
    sim = Simulator([], policy, SimConfig(history=list(done), preemptive=False))
    assert sim.cfg.gittins_index == "whole"
    recs, _ = fold_jobs({}, jobs, 2000.0)
    views = [job_view(j, recs[j.job_id], 2000.0) for j in jobs]
    again = rank(views, 2000.0, sim.cfg, sim.table)
    assert [(d.job_id, d.index, d.group) for d in again] == [
        (d.job_id, d.index, d.group) for d in res.decisions
    ]
    mine = build_table(store.history_kinds(10), sim.cfg)
    assert mine.kinds.groups == sim.table.kinds.groups
    store.close()


SACCT_KINDS = """JobIDRaw|Submit|Start|End|AllocTRES|User|Partition|JobName|Account|Timelimit
201|2026-11-01T10:00:00|2026-11-01T10:05:00|2026-11-01T11:05:00|cpu=4,gres/gpu=2,node=1|alice|gpu|train|ml|1-00:00:00
202|2026-11-01T10:00:00|2026-11-01T10:00:10|2026-11-01T10:10:10|cpu=1,gres/gpu=1,node=1|bob|gpu|eval|phys|UNLIMITED
203|2026-11-01T10:00:00|2026-11-01T10:00:10|2026-11-01T10:10:10|cpu=1,gres/gpu=1,node=1|bob|gpu|eval|phys|30
"""


def test_sacct_history_keeps_the_kind(tmp_path):
    from slurm_ext.slurm import CliSlurmClient
    from slurm_ext.slurm.history import completion_rows
    from slurm_ext.slurm.sacct import SACCT_FIELDS

    assert SACCT_FIELDS[-3:] == ("JobName", "Account", "Timelimit")
    (tmp_path / "out.txt").write_text(SACCT_KINDS)
    fake = tmp_path / "sacct"
    fake.write_text(f"#!/bin/sh\ncat {tmp_path / 'out.txt'}\n")
    fake.chmod(0o755)
    client = CliSlurmClient(bin_dir=str(tmp_path))
    rows = {r[0]: r for r in completion_rows(client.completed_jobs(0.0))}
    assert rows[201][4:] == ("alice", "train", "ml", 86400.0, 2)
    assert rows[202][4:] == ("bob", "eval", "phys", None, 1)
    assert rows[203][4:] == ("bob", "eval", "phys", 1800.0, 1)
    store = Store(tmp_path / "s.db")
    assert store.add_completions(rows.values(), "sacct") == 3
    assert store.history_kinds(10)[-1].user in ("alice", "bob")
    store.close()
