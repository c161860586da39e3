"""The service's pure pieces and its store: attained-service folding, write-back values,
placement planning, schema versioning. No Slurm needed."""

from __future__ import annotations

import random
import sqlite3
import time
from pathlib import Path

import pytest

from slurm_ext.core.model import Job, JobState, Node
from slurm_ext.service.fold import fold_jobs
from slurm_ext.service.loop import plan_placements
from slurm_ext.service.priority_values import assign_values, changed
from slurm_ext.store.db import Store, StoreError
from slurm_ext.store.schema import SCHEMA_VERSION


def _job(
    job_id: int,
    state: str,
    gpus: int = 2,
    start: float | None = None,
    end: float | None = None,
    **kw,
) -> Job:
    return Job(
        job_id=job_id,
        state=JobState(state),
        gpus=gpus,
        submit_time=100.0,
        start_time=start,
        end_time=end,
        **kw,
    )


def test_fold_accumulates_stints_and_records_completion():
    recs, comp = fold_jobs({}, [_job(1, "PENDING")], now=110)
    assert recs[1].attained_gpu_s(110) == 0 and recs[1].waiting_since == 100
    recs, comp = fold_jobs(recs, [_job(1, "RUNNING", start=120)], now=130)
    assert recs[1].attained_gpu_s(130) == 20  # 2 GPUs x 10 s, from Slurm's StartTime
    # requeued: back to pending; the stint closes at the last time we saw it running
    recs, comp = fold_jobs(recs, [_job(1, "PENDING")], now=150)
    assert (recs[1].closed_gpu_s, recs[1].last_run_s, recs[1].waiting_since) == (20, 10, 150)
    recs, comp = fold_jobs(recs, [_job(1, "RUNNING", start=160)], now=170)
    assert recs[1].attained_gpu_s(170) == 40
    recs, comp = fold_jobs(recs, [_job(1, "COMPLETED", start=160, end=175)], now=180)
    assert recs[1].done and comp == [(1, 50.0, 25.0, 175)]
    # a done job is never revived or counted twice
    recs2, comp2 = fold_jobs(recs, [_job(1, "COMPLETED", start=160, end=175)], now=190)
    assert comp2 == [] and 1 not in recs2


def test_fold_counts_a_job_that_vanished_while_running():
    recs, _ = fold_jobs({}, [_job(7, "RUNNING", gpus=4, start=100)], now=110)
    recs, comp = fold_jobs(recs, [], now=500)  # purged while the service was away
    assert recs[7].done and comp == [(7, 40.0, 10.0, 110)]


def test_fold_does_not_count_suspended_time():
    recs, _ = fold_jobs({}, [_job(3, "RUNNING", gpus=1, start=100)], now=110)
    recs, _ = fold_jobs(recs, [_job(3, "SUSPENDED", gpus=1, start=100)], now=120)
    assert recs[3].closed_gpu_s == 20
    recs, _ = fold_jobs(recs, [_job(3, "RUNNING", gpus=1, start=100)], now=200)  # resumed at 200
    assert recs[3].attained_gpu_s(210) == 30


def _strictly_decreasing(order, values):
    vals = [values[j] for j in order]
    return all(a > b for a, b in zip(vals, vals[1:]))


def test_values_follow_order_and_only_changes_are_written():
    order = list(range(2000))
    first = assign_values(order, {}, 1, 1_000_000)
    assert _strictly_decreasing(order, first) and all(1 <= v <= 1_000_000 for v in first.values())
    assert changed(assign_values(order, first, 1, 1_000_000), first) == {}
    swapped = order[:]
    swapped[5], swapped[1500] = swapped[1500], swapped[5]
    second = assign_values(swapped, first, 1, 1_000_000)
    assert _strictly_decreasing(swapped, second)
    assert len(changed(second, first)) <= 2


def test_values_survive_many_random_insertions():
    rng = random.Random(7)
    order, cur, writes = list(range(500)), {}, 0
    cur = assign_values(order, cur, 1, 1_000_000)
    for k in range(300):
        pos = rng.randrange(len(order) + 1)
        order.insert(pos, 10_000 + k)
        new = assign_values(order, cur, 1, 1_000_000)
        assert _strictly_decreasing(order, new)
        writes += len(changed(new, cur))
        cur = new
    assert writes < 300 * 10  # amortised: a few writes per inserted job, not the queue


def test_values_band_too_small_is_a_clear_error():
    with pytest.raises(ValueError, match="value_max"):
        assign_values(list(range(10)), {}, 1, 5)


def test_placement_plans_consolidate_and_take_gpus():
    nodes = [Node("n1", gpus=4, gpus_alloc=3), Node("n2", gpus=4), Node("n3", gpus=4, gpus_alloc=2)]
    jobs = [
        Job(job_id=1, gpus=4, gpus_per_node=0, state=JobState.PENDING, comment="model=vgg16"),
        Job(job_id=2, gpus=2, gpus_per_node=0, state=JobState.PENDING, comment="model=vgg16"),
        Job(job_id=3, gpus=4, gpus_per_node=0, state=JobState.PENDING, comment="model=vgg16"),
        Job(job_id=4, gpus=8, gpus_per_node=4, num_nodes=2, state=JobState.PENDING),
    ]
    plan = plan_placements(jobs, nodes, "consolidate")
    assert plan[1] == ("n2",)  # the only whole free node
    assert plan[2] == ("n3",)  # best fit: exactly 2 free there
    assert plan[3] is None  # 1 GPU left in total: must wait
    assert plan[4] is None  # per-node multi-node request: never rewritten


def test_store_migrates_and_refuses_newer(tmp_path):
    path = tmp_path / "s.db"
    store = Store(path)
    assert store.schema_version == SCHEMA_VERSION
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store.pin(5, "admin")
    store.close()
    ro = Store(path, readonly=True)
    assert ro.pins() == {5}
    with pytest.raises(sqlite3.OperationalError):
        ro.pin(6, "x")  # read-only really is read-only
    ro.close()
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="newer than this release"):
        Store(path)
    with pytest.raises(StoreError, match="store not found"):
        Store(tmp_path / "missing.db", readonly=True)


def test_job_view_gives_the_policy_the_current_stint():
    from slurm_ext.service.loop import job_view

    recs, _ = fold_jobs({}, [_job(1, "RUNNING", gpus=2, start=100)], now=100)
    view = job_view(_job(1, "RUNNING", gpus=2, start=100), recs[1], now=160)
    assert (view.running, view.last_run_s, view.attained_gpu_s) == (True, 60, 120)
    recs, _ = fold_jobs(recs, [_job(1, "RUNNING", gpus=2, start=100)], now=200)
    recs, _ = fold_jobs(recs, [_job(1, "PENDING", gpus=2)], now=200)
    view = job_view(_job(1, "PENDING", gpus=2), recs[1], now=300)
    assert (view.running, view.last_run_s, view.waiting_since) == (False, 100, 200)


SACCT_OUT = """JobIDRaw|Submit|Start|End|AllocTRES|User|Partition|JobName
101|2026-11-01T10:00:00|2026-11-01T10:05:00|2026-11-01T11:05:00|billing=4,cpu=4,gres/gpu=2,mem=8G,node=1|alice|gpu|train
101.batch|2026-11-01T10:05:00|2026-11-01T10:05:00|2026-11-01T11:05:00|cpu=4,gres/gpu=2,mem=8G,node=1|||batch
102|2026-11-01T10:00:00|2026-11-01T10:00:10|2026-11-01T10:10:10|billing=1,cpu=1,mem=1G,node=1|bob|cpu|prep
103|2026-11-01T12:00:00|Unknown|2026-11-01T12:01:00|billing=1,cpu=1,gres/gpu=1,node=1|bob|gpu|cancelled-before-start
104|2026-11-02T00:00:00|2026-11-02T00:00:00|2026-11-02T00:30:00|cpu=8,gres/gpu:a100=4,gres/gpu=4,node=1|carol|gpu|big
"""


def test_sacct_history_keeps_gpu_jobs_with_their_gpu_seconds(tmp_path):
    from datetime import datetime

    from slurm_ext.slurm import CliSlurmClient
    from slurm_ext.slurm.history import completion_rows

    fake = tmp_path / "sacct"
    (tmp_path / "out.txt").write_text(SACCT_OUT)
    fake.write_text(f'#!/bin/sh\necho "$@" > {tmp_path / "argv"}\ncat {tmp_path / "out.txt"}\n')
    fake.chmod(0o755)
    rows = completion_rows(CliSlurmClient(bin_dir=str(tmp_path)).completed_jobs(1.8e9))
    by_id = {r[0]: r for r in rows}
    assert sorted(by_id) == [101, 104]  # steps, CPU-only and never-started jobs are left out
    assert by_id[101][1:3] == (2 * 3600.0, 3600.0)
    assert by_id[104][1:3] == (4 * 1800.0, 1800.0)
    # the End sacct gives, not submit + run (which would drop the 5-minute wait)
    assert by_id[101][3] == datetime.fromisoformat("2026-11-01T11:05:00").timestamp()
    argv = (tmp_path / "argv").read_text()
    since = datetime.fromtimestamp(1.8e9).strftime("%Y-%m-%dT%H:%M:%S")
    assert f"--starttime={since}" in argv and "--allocations" in argv


def test_sacct_failure_is_a_slurm_error_with_its_message(tmp_path):
    from slurm_ext.slurm import CliSlurmClient
    from slurm_ext.slurm.client import SlurmError

    fake = tmp_path / "sacct"
    fake.write_text("#!/bin/sh\necho 'Slurm accounting storage is disabled' >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(SlurmError, match="accounting storage is disabled"):
        CliSlurmClient(bin_dir=str(tmp_path)).completed_jobs(0.0)


def test_store_keeps_the_newest_cumulative_report(tmp_path):
    from slurm_ext.core.reports import JobReport

    def rep(end: float, gpu_s: float) -> JobReport:
        return JobReport(node="n1", job_id=9, gpu_seconds=gpu_s, gpu_util_mean=0.5, gpu_util_peak=0.5,
                         gpu_mem_peak_bytes=0, cpu_cores_alloc=2, cpu_cores_used=1.0, gpu_energy_j=gpu_s * 100,
                         cpu_energy_j=0.0, gpu_uuids=("GPU-1",), gpu_type="x", samples=1,
                         period_start=100.0, period_end=end)  # fmt: skip

    store = Store(tmp_path / "s.db")
    store.add_reports([rep(200, 50)])
    store.add_reports([rep(150, 20)])  # a late re-delivery of an older report
    (kept,) = store.reports(9)
    assert (kept.period_end, kept.gpu_seconds, kept.gpu_uuids) == (200, 50, ("GPU-1",))
    store.add_reports([rep(260, 80)])
    assert store.reports(9)[0].gpu_seconds == 80


def test_a_user_without_write_access_can_read_the_store():
    """`slurm-ext queue/explain` as a non-admin: the store's directory is not theirs."""
    import shutil
    import subprocess
    import tempfile

    py, runuser = shutil.which("python3", path="/usr/bin"), shutil.which("runuser")
    if py is None or runuser is None:
        pytest.fail("needs /usr/bin/python3 and runuser (Debian's python3 and util-linux)")
    root = Path(tempfile.mkdtemp(prefix="slurm-ext-ro-"))  # pytest's tmp dirs are 0700
    try:
        code = root / "code"
        for pkg in ("slurm_ext", "nodeagent"):
            shutil.copytree(Path(__file__).resolve().parents[1] / pkg, code / pkg)
        state = root / "state"
        state.mkdir()
        store = Store(state / "service.db")
        store.pin(42, "admin")
        db = str(state / "service.db")
        probe = f"from slurm_ext.store.db import Store; print(sorted(Store({db!r}, readonly=True).pins()))"
        for p in [root, *root.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)

        def as_nobody() -> subprocess.CompletedProcess:
            return subprocess.run([runuser, "-u", "nobody", "--", py, "-c", probe],
                                  env={"PYTHONPATH": str(code), "PATH": "/usr/bin:/bin"},
                                  capture_output=True, text=True, timeout=30)  # fmt: skip

        running = as_nobody()  # the service's connection is open: WAL files exist
        store.close()  # the service stopped: WAL checkpointed and removed
        stopped = as_nobody()
        assert not (state / "service.db-shm").exists()
        assert (running.stdout.strip(), stopped.stdout.strip()) == ("[42]", "[42]"), (
            running.stderr,
            stopped.stderr,
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_promoted_job_keeps_its_fresh_quantum_for_the_stint():
    """As in the simulator: a job the starvation guard promoted starts a stint whose queue
    counts service since the promotion; the next stint counts all of it again."""
    from slurm_ext.policy import PolicyConfig, rank
    from slurm_ext.service.loop import job_view

    cfg = PolicyConfig(
        policy="las", queue_thresholds_gpu_s=[100.0], starvation_factor=2.0, min_run_s=0.0
    )
    recs, _ = fold_jobs({}, [_job(1, "RUNNING", gpus=2, start=100)], now=100)
    recs, _ = fold_jobs(recs, [_job(1, "RUNNING", gpus=2, start=100)], now=200)  # 200 GPU-s
    recs, _ = fold_jobs(recs, [_job(1, "PENDING", gpus=2)], now=200)  # requeued at 200
    waiting = job_view(_job(1, "PENDING", gpus=2), recs[1], now=500)  # waited 300 > 2 x 100
    (d,) = rank([waiting], 500, cfg)
    assert d.promoted and d.queue == 0
    recs, _ = fold_jobs(recs, [_job(1, "RUNNING", gpus=2, start=510)], now=520, promoted={1})
    assert recs[1].promoted_at_gpu_s == 200
    running = job_view(_job(1, "RUNNING", gpus=2, start=510), recs[1], now=520)
    (d,) = rank([running], 520, cfg)
    assert d.queue == 0  # 20 GPU-s since the promotion, not 220
    recs, _ = fold_jobs(recs, [_job(1, "PENDING", gpus=2)], now=600)
    assert recs[1].promoted_at_gpu_s is None
    (d,) = rank([job_view(_job(1, "PENDING", gpus=2), recs[1], now=601)], 601, cfg)
    assert d.queue == 1  # the next stint counts all of its service again


def test_a_version_1_store_is_migrated_in_place(tmp_path):
    from slurm_ext.store.schema import MIGRATIONS

    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript(MIGRATIONS[0] + ";PRAGMA user_version=1;")
    db.execute(
        "INSERT INTO jobs (job_id, gpus, closed_gpu_s, state) VALUES (5, 2, 123.0, 'PENDING')"
    )
    db.execute("INSERT INTO completions VALUES (4, 50.0, 25.0, 1000.0, 'service')")
    db.commit()
    db.close()
    store = Store(path)
    assert store.schema_version == SCHEMA_VERSION >= 2
    rec = store.job(5)
    assert (rec.closed_gpu_s, rec.promoted_at_gpu_s) == (123.0, None)
    assert store.history_gpu_s(10) == [50.0]


def test_example_service_toml_documents_the_defaults():
    """etc/service.toml says its values are the defaults: keep it true."""
    from slurm_ext.core.config import load_config
    from slurm_ext.service.loop import ServiceConfig

    path = Path(__file__).resolve().parents[1] / "etc" / "service.toml"
    assert load_config(ServiceConfig, path) == ServiceConfig()


def test_example_service_toml_names_every_setting():
    """Every key service.toml can set (`file_keys`) appears in etc/service.toml, set to its
    default or, where the default is unset, commented out with an example; or, where the
    shipped file leaves it out, in the docs: a tuning constant (`[policy.tuning]`) in
    docs/simulator.md's "Tuning constants", another setting in docs/admin-guide.md's
    "Other settings"."""
    import re

    from slurm_ext.core.config import file_keys
    from slurm_ext.service.loop import ServiceConfig

    repo = Path(__file__).resolve().parents[1]
    text = (repo / "etc" / "service.toml").read_text()
    sections = re.split(r"^\[([\w.]+)\]\s*$", text, flags=re.M)
    by_table = {"": sections[0], **dict(zip(sections[1::2], sections[2::2], strict=True))}
    simulator = (repo / "docs" / "simulator.md").read_text()
    tuning = simulator.split("### Tuning constants", 1)[1].split("\n### ", 1)[0]
    admin = (repo / "docs" / "admin-guide.md").read_text()
    other = admin.split("### Other settings", 1)[1].split("\n## ", 1)[0]
    missing, listed = [], 0
    for key, _ in file_keys(ServiceConfig):
        table, _, name = key.rpartition(".")
        if table.endswith("tuning"):
            found = f"| `{name}` |" in tuning
        elif re.search(rf"^#? ?{name} = ", by_table.get(table, ""), re.M):
            found = True
            listed += 1
        else:
            found = f"`{name}`" in other or f"] {name}`" in other
        if not found:
            missing.append(key)
    assert missing == []
    assert listed <= 25  # the shipped file lists what an admin sets


def test_serve_survives_a_broken_store_and_recovers(tmp_path, caplog):
    """A store error is logged and backed off like a Slurm outage; the loop goes on."""
    import threading

    from slurm_ext.service.loop import Service, ServiceConfig
    from slurm_ext.store.schema import MIGRATIONS
    from slurm_ext.testing.snapshot_client import ReplayClient

    cfg = ServiceConfig(
        store=str(tmp_path / "s.db"),
        interval_s=0.05,
        backoff_max_s=0.2,
        port=0,
        history_source="store",
    )
    store = Store(cfg.store)
    client = ReplayClient(
        [_job(1, "PENDING"), _job(2, "RUNNING", start=100)], [Node("n1", gpus=4, gpus_alloc=2)]
    )
    svc = Service(cfg, client, store)
    svc.run_pass()
    seen: dict[str, int] = {}

    def break_and_mend() -> None:  # another process's view of the same file
        db = sqlite3.connect(cfg.store, timeout=10)
        db.execute("DROP TABLE decisions")
        db.commit()
        deadline = time.monotonic() + 10
        while svc.failures < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        seen["failures"] = svc.failures
        create = MIGRATIONS[0][MIGRATIONS[0].index("CREATE TABLE decisions") :]
        db.execute(create[: create.index(");") + 2])
        for later in MIGRATIONS[1:]:  # the columns later releases added to it
            for stmt in later.split(";"):
                if "ALTER TABLE decisions" in stmt:
                    db.execute(stmt)
        db.commit()
        while svc.failures and time.monotonic() < deadline:
            time.sleep(0.02)
        svc.stop()

    helper = threading.Thread(target=break_and_mend, daemon=True)
    with caplog.at_level("INFO", logger="slurm_ext.service.loop"):
        helper.start()
        assert svc.serve() == 0  # returns only when stopped
    helper.join(5)
    assert seen["failures"] >= 2 and svc.failures == 0
    assert "no such table: decisions" in caplog.text and "recovered after" in caplog.text
    assert set(store.decisions()) == {1, 2}


def test_service_ranks_by_gpu_class_tables_from_its_store_as_the_simulator(tmp_path):
    """The store keeps gpu_s and run_s of each completion, so it knows the GPU count: with
    gittins_classes = "gpus" the service builds the simulator's per-class tables."""
    from dataclasses import replace

    from slurm_ext.policy import PolicyConfig, build_table
    from slurm_ext.service.loop import Service, ServiceConfig
    from slurm_ext.sim.engine import SimConfig, Simulator
    from slurm_ext.testing.snapshot_client import ReplayClient

    # (gpus, gpu_s) as completed, oldest first; hand-computed in test_policy_gittins
    done = [(1, 30.0), (2, 10.0), (1, 30.0), (2, 200.0)]
    policy = PolicyConfig(
        queue_thresholds_gpu_s=[1e6],
        min_run_s=0,
        gittins_grid_start_gpu_s=100.0,
        gittins_classes="gpus",
        gittins_class_min_samples=2,
        gittins_index="quantum",  # the hand-worked tables (the service does not preempt)
        wait_guard_factor=0,  # both jobs waited long: the guard would order them FIFO
    )
    store = Store(tmp_path / "s.db")
    store.save_jobs([], [(i, s, s / g, 1000.0 + i) for i, (g, s) in enumerate(done)])
    store.add_completions([(9, 0.0, 0.0, 900.0)], "sacct")  # no run time: class unknown
    assert store.history(10) == [(2, 200.0), (1, 30.0), (2, 10.0), (1, 30.0), (None, 0.0)]
    sim = Simulator([], policy, SimConfig(history=list(done)))
    table = build_table(store.history(10), policy)
    assert (table.grid, table.values) == (sim.table.grid, sim.table.values)
    assert {c: (t.grid, t.values) for c, t in table.classes.items()} == {
        c: (t.grid, t.values) for c, t in sim.table.classes.items()
    }
    jobs = [_job(1, "PENDING", gpus=1), _job(2, "PENDING", gpus=2)]  # tie: job 1 first
    nodes = [Node("g1", state="IDLE", cpus=64, gpus=8)]
    for classes, order in (("gpus", [2, 1]), ("pooled", [1, 2])):
        cfg = ServiceConfig(
            store=str(tmp_path / "s.db"),
            port=0,
            history_source="store",
            policy=replace(policy, gittins_classes=classes),
        )
        res = Service(cfg, ReplayClient(jobs, nodes), store).run_pass(2000.0)
        assert [d.job_id for d in res.decisions] == order
    store.close()


def test_writes_stop_when_slurmctld_stops_answering_and_resume_next_pass(tmp_path):
    """Batch writes: failures are named per job and retried; an outage mid-write aborts
    the pass's writes (none recorded as written) instead of timing out job by job."""
    from slurm_ext.service.loop import Service, ServiceConfig
    from slurm_ext.slurm.client import JobNotFound, SlurmUnavailable
    from slurm_ext.testing.snapshot_client import ReplayClient

    class Flaky(ReplayClient):
        def __init__(self, *a) -> None:
            super().__init__(*a)
            self.mode, self.calls = "down", []

        def set_site_factors(self, values):
            self.calls.append(dict(values))
            if self.mode == "down":
                raise SlurmUnavailable("scontrol", "Unable to contact slurm controller")
            return {2: JobNotFound("scontrol update JobId=2", "Invalid job id")}

    cfg = ServiceConfig(store=str(tmp_path / "s.db"), port=0, history_source="store")
    store = Store(cfg.store)
    jobs = [_job(1, "PENDING"), _job(2, "PENDING"), _job(3, "PENDING")]
    client = Flaky(jobs, [Node("n1", gpus=4)])
    svc = Service(cfg, client, store)
    res = svc.run_pass(1000.0)
    assert res.writes == 0 and res.errors == 1 and len(client.calls) == 1
    assert all(d.value is None for d in store.decisions().values())
    client.mode = "up"
    res = svc.run_pass(1010.0)
    assert sorted(client.calls[1]) == [1, 2, 3]  # all written again
    assert res.writes == 2 and res.errors == 1
    stored = store.decisions()
    assert stored[2].value is None and stored[1].value is not None
    res = svc.run_pass(1020.0)
    assert client.calls[2] == {2: client.calls[1][2]}  # only the failed one, same value
    store.close()


def test_a_pass_persists_only_what_changed_and_the_store_keeps_up(tmp_path):
    """A pass writes only records whose persisted fields changed and decisions that
    changed; a decision whose rank alone moved keeps the time it was made, with its new
    rank in the store. What the store holds is what the service decided, every pass."""
    from slurm_ext.policy import PolicyConfig
    from slurm_ext.service.loop import Service, ServiceConfig
    from slurm_ext.testing.snapshot_client import ReplayClient

    def pending(job_id: int, submit: float) -> Job:
        return Job(job_id=job_id, state=JobState.PENDING, gpus=1, submit_time=submit)

    running = Job(job_id=1, state=JobState.RUNNING, gpus=1, submit_time=10.0, start_time=20.0,
                  nodes=("n1",))  # fmt: skip
    jobs = [running, *(pending(j, 50.0 + j) for j in range(2, 6))]
    client = ReplayClient(jobs, [Node("n1", state="MIXED", gpus=4, gpus_alloc=1)])
    cfg = ServiceConfig(store=str(tmp_path / "s.db"), port=0, history_source="store",
                        policy=PolicyConfig(policy="fifo"))  # fmt: skip
    store = Store(cfg.store)
    saved: list[list] = []
    save_jobs = store.save_jobs
    store.save_jobs = lambda records, completions=(): (  # type: ignore[method-assign]
        saved.append(list(records)),
        save_jobs(records, completions),
    )
    svc = Service(cfg, client, store)
    svc.run_pass(100.0)
    assert sorted(r.job_id for r in saved[-1]) == [1, 2, 3, 4, 5]
    first = store.decisions()
    svc.run_pass(130.0)  # nothing changed in Slurm
    assert saved[-1] == []
    client.jobs_snapshot = [*jobs, pending(6, 40.0)]  # submitted before the others: first
    res = svc.run_pass(160.0)
    assert [r.job_id for r in saved[-1]] == [6]
    stored = store.decisions()
    assert {d.job_id: d.rank for d in res.decisions} == {j: d.rank for j, d in stored.items()}
    moved = [j for j in range(2, 6) if stored[j].rank != first[j].rank]
    assert moved, "the new job should move the waiting ones down"
    for j in moved:  # only the rank moved: the same decision, made at the first pass
        assert stored[j].decided_at == 100.0
        assert (stored[j].queue, stored[j].reason, stored[j].value) == (
            first[j].queue, first[j].reason, first[j].value,
        )  # fmt: skip
    assert stored[6].decided_at == 160.0
    # a fresh service on the same store reads what this one holds in memory
    assert Service(cfg, client, store)._load()[1] == svc._decisions
    store.close()


def _other(value):
    """A different value of the same kind, for perturbing one field."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, JobState):
        return JobState.SUSPENDED if value != JobState.SUSPENDED else JobState.PENDING
    if isinstance(value, (int, float)):
        return value + 7
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, tuple):
        return (*value, "x")
    return 3.0  # None: an optional number


def test_a_waiting_jobs_view_is_reused_only_while_all_it_reads_is_equal():
    """`waiting_inputs` holds everything `job_view` reads of a job that is not running:
    changing any one field of the job or its record that changes the view changes them."""
    from dataclasses import fields, replace

    from slurm_ext.service.steps import job_view, waiting_inputs
    from slurm_ext.store.rows import JobRecord

    job = Job(job_id=4, name="n", user="u", account="a", partition="p", gpus=2,
              submit_time=100.0, time_limit_s=600.0, comment="model=bert")  # fmt: skip
    rec = JobRecord(job_id=4, user="u", partition="p", name="n", model_tag="bert", gpus=2,
                    submit_time=100.0, closed_gpu_s=50.0, closed_run_s=25.0, last_run_s=25.0,
                    run_start=None, waiting_since=200.0, last_seen=300.0, state="PENDING",
                    done=False)  # fmt: skip
    base_view, base_key = job_view(job, rec, 400.0), waiting_inputs(job, rec)
    checked = 0
    for obj, fs in ((job, fields(job)), (rec, fields(rec))):
        for f in fs:
            j2, r2 = job, rec
            if obj is job:
                j2 = replace(job, **{f.name: _other(getattr(job, f.name))})
            else:
                r2 = replace(rec, **{f.name: _other(getattr(rec, f.name))})
            if r2.run_start is not None or j2.running:
                continue  # running: never reused
            if job_view(j2, r2, 400.0) != base_view:
                checked += 1
                assert waiting_inputs(j2, r2) != base_key, f"{type(obj).__name__}.{f.name}"
    assert checked >= 10
    # and the service reuses an equal view across passes: same object
    assert job_view(job, rec, 500.0) == base_view  # a waiting job's view does not age


def test_order_inversions_counts_adjacent_pending_jobs_slurm_orders_the_other_way():
    from slurm_ext.core.model import Decision
    from slurm_ext.service.steps import order_inversions

    def job(job_id: int, prio: int, state=JobState.PENDING) -> Job:
        return Job(job_id=job_id, state=state, gpus=1, submit_time=0.0, priority=prio)

    jobs = {j.job_id: j for j in (
        job(1, 500), job(2, 400), job(3, 450), job(4, 0), job(5, 300),
        job(6, 900, JobState.RUNNING), job(7, 100),
    )}  # fmt: skip
    order = [Decision(job_id=j, rank=r) for r, j in enumerate([6, 1, 2, 3, 4, 5, 7])]
    # compared: 1, 2, 3, 5, 7 (6 runs, 4's priority is unknown): 2 -> 3 is inverted
    assert order_inversions(order, jobs, written=()) == (1, 4)
    # a job written this pass is left out (Slurm's priority predates the write)
    assert order_inversions(order, jobs, written={3}) == (0, 3)
    assert order_inversions([], jobs, written=()) == (0, 0)


def test_the_service_warns_when_slurm_reorders_its_queue(tmp_path, caplog):
    """Slurm's own factors (here a priority that grows with submit time, as if QOS or
    fair-share outweighed the written spacing) reorder the service's FIFO order: after
    a pass that wrote nothing, every compared pair is inverted, the pass says so, the
    log warns once and names value_max; a queue Slurm orders as the service does gives
    no warning."""
    from slurm_ext.policy import PolicyConfig
    from slurm_ext.service.loop import Service, ServiceConfig
    from slurm_ext.testing.snapshot_client import ReplayClient

    def pending(job_id: int, prio: int) -> Job:
        return Job(job_id=job_id, state=JobState.PENDING, gpus=1, submit_time=float(job_id),
                   priority=prio)  # fmt: skip

    # priorities above every written value (value_max 10^6), so none reads as lost
    against = [pending(j, 10_000_000 + j) for j in range(1, 31)]
    along = [pending(j, 10_000_000 - j) for j in range(1, 31)]
    for jobs, warned in ((against, True), (along, False)):
        caplog.clear()
        path = tmp_path / f"{warned}.db"
        cfg = ServiceConfig(store=str(path), port=0, history_source="store",
                            policy=PolicyConfig(policy="fifo"))  # fmt: skip
        svc = Service(cfg, ReplayClient(jobs, [Node("n1", gpus=4)]), Store(cfg.store))
        first = svc.run_pass(100.0)
        assert first.inversions == (0, 0)  # every value written this pass: nothing compared
        second = svc.run_pass(130.0)
        assert second.planned == {}
        assert second.inversions == ((29, 29) if warned else (0, 29))
        svc.run_pass(160.0)
        text = caplog.text
        assert text.count("adjacent pending jobs against the service's order") == int(warned)
        if warned:
            assert "raise value_max (now 1000000)" in text
        svc.store.close()
