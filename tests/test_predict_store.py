"""The loop from node-agent reports to the hook's table: a real SQLite store filled the
way the service fills it, `predict build --from-store`, and the service's periodic rebuild."""

from __future__ import annotations

import json
import logging
import math
import os
import random
import threading
from dataclasses import fields
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_ext.cli.predict import predict
from slurm_ext.core.config import ConfigError, from_dict, load_config
from slurm_ext.core.model import Job, JobState, Node
from slurm_ext.core.reports import JobReport
from slurm_ext.predict.curve import fit_saturation
from slurm_ext.predict.from_store import (
    PeriodicRebuild,
    PredictorServiceConfig,
    rebuild_table,
    samples_from_reports,
)
from slurm_ext.predict.table import TableRow, load_table, render_table
from slurm_ext.service.loop import Service, ServiceConfig
from slurm_ext.store.db import Store
from slurm_ext.store.rows import JobRecord
from slurm_ext.testing.snapshot_client import ReplayClient

H100 = "NVIDIA H100 80GB HBM3"
V100 = "Tesla V100-SXM2-16GB"  # deliberately not in the test config's gpu_types
PLATEAU = 0.9
RESNET_KNEE = 7.0  # ResNet50: GPU saturates at ~7 cores/GPU (SAD)
OVERFEAT_KNEE = 48.0  # Overfeat: still rising at 40, the most we sample
MAX_CPUS = 56

PREDICTOR_TOML = f"""
[predictor]
max_cpus_per_gpu = {MAX_CPUS}
min_samples = 3

[gpu_types]
"{H100}" = "h100"
"""


def util(knee: float, cores_per_gpu: float) -> float:
    return PLATEAU * min(1.0, cores_per_gpu / knee)


def expected_cores(knee: float, sampled_max: float) -> int:
    """What the curve says: fewest whole cores at 95% of the plateau, or the max when the
    samples never reach the plateau."""
    need = math.ceil(0.95 * knee - 1e-9)
    return need if knee <= sampled_max else MAX_CPUS


def record(job_id: int, user: str, name: str, model: str | None) -> JobRecord:
    return JobRecord(
        job_id=job_id,
        user=user,
        partition="gpu",
        name=name,
        model_tag=model,
        gpus=0,
        submit_time=0.0,
        closed_gpu_s=0.0,
        closed_run_s=0.0,
        last_run_s=0.0,
        run_start=None,
        waiting_since=None,
        last_seen=0.0,
        state="COMPLETED",
        done=True,
    )


def report(
    job_id: int,
    node: str,
    gpus: int,
    cores: int | None,
    gpu_util: float,
    gpu_type: str,
    start: float = 1000.0,
    end: float = 2000.0,
) -> JobReport:
    return JobReport(
        node=node,
        job_id=job_id,
        gpu_seconds=gpus * (end - start),
        gpu_util_mean=gpu_util,
        gpu_util_peak=min(1.0, gpu_util + 0.05),
        gpu_mem_peak_bytes=1 << 30,
        cpu_cores_alloc=cores,
        cpu_cores_used=float(cores or 0) * 0.8,
        gpu_energy_j=1e5,
        cpu_energy_j=1e4,
        gpu_uuids=tuple(f"GPU-{node}-{i}" for i in range(gpus)),
        gpu_type=gpu_type,
        samples=100,
        period_start=start,
        period_end=end,
        final=True,
    )


RESNET_CORES = [2, 3, 4, 6, 8, 10, 12, 16]  # cores per GPU, one job each (2 GPUs)
OVERFEAT_CORES = [8, 16, 24, 32, 40]


def fill_store(path: Path) -> Store:
    """resnet50 jobs (model tag, H100, 2 GPUs) and overfeat jobs (user/jobname key, V100,
    two nodes x 2 GPUs), with the noise real delivery adds: stale and re-sent reports."""
    store = Store(path)
    records, reports = [], []
    for i, c in enumerate(RESNET_CORES):
        job_id = 100 + i
        records.append(record(job_id, "alice", f"rn{i}", "resnet50"))
        # an early cumulative report (warm-up, low utilisation, one node of the pair)...
        reports.append(report(job_id, "g1", 2, 2 * c, 0.05, H100, start=900.0, end=950.0))
        # ...superseded by the final one from a later agent period: only that one counts
        reports.append(report(job_id, "g1", 2, 2 * c, util(RESNET_KNEE, c), H100))
    for i, c in enumerate(OVERFEAT_CORES):
        job_id = 200 + i
        records.append(record(job_id, "bob", "overfeat", None))  # key "bob/overfeat"
        for node in ("g2", "g3"):
            reports.append(report(job_id, node, 2, 2 * c, util(OVERFEAT_KNEE, c), V100))
    # gives no sample: no job record; a name that is no key; cores unknown; no GPU time
    reports.append(report(900, "g1", 1, 8, 0.5, H100))
    records.append(record(901, "carol", "has space", None))
    reports.append(report(901, "g1", 1, 8, 0.5, H100))
    records.append(record(902, "carol", "nocpuset", "resnet50"))
    reports.append(report(902, "g1", 1, None, 0.5, H100))
    records.append(record(903, "carol", "idle", "resnet50"))
    reports.append(report(903, "g1", 0, 8, 0.0, ""))
    store.save_jobs(records)
    store.add_reports(reports)
    store.add_reports(reports[:5])  # re-delivered after a lost response
    return store


@pytest.fixture
def filled(tmp_path: Path) -> tuple[Path, Path]:
    db = tmp_path / "service.db"
    fill_store(db).close()
    cfg = tmp_path / "predictor.toml"
    cfg.write_text(PREDICTOR_TOML)
    return db, cfg


def rows(table: Path) -> dict[tuple[str, str], int]:
    parsed = load_table(table)
    assert parsed.valid, parsed.problems
    return {k: r.cpus_per_gpu for k, r in parsed.rows.items()}


def expected_rows() -> dict[tuple[str, str], int]:
    rn = expected_cores(RESNET_KNEE, max(RESNET_CORES))
    of = expected_cores(OVERFEAT_KNEE, max(OVERFEAT_CORES))
    return {("resnet50", "h100"): rn, ("resnet50", "*"): rn, ("bob/overfeat", "*"): of}


def test_build_from_store_matches_the_generating_curves(filled, tmp_path: Path) -> None:
    db, cfg = filled
    before = db.read_bytes()
    out = tmp_path / "predictor.tsv"
    res = CliRunner().invoke(
        predict, ["build", "--from-store", str(db), "--config", str(cfg), "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert rows(out) == expected_rows()
    assert expected_rows()[("resnet50", "h100")] == 7
    assert expected_rows()[("bob/overfeat", "*")] == MAX_CPUS
    assert db.read_bytes() == before  # opened read-only
    assert "13 samples" in res.output  # 8 resnet50 + 5 overfeat jobs, one sample per job
    for reason in (
        "no job record",
        "no valid workload key",
        "allocated cores unknown",
        "no GPU time",
    ):
        assert f"skipped 1 jobs: {reason}" in res.output
    assert f"GPU name {V100!r} has no [gpu_types] entry" in res.output

    evidence = json.loads(Path(f"{out}.evidence.json").read_text())
    # one point per job, at the final report's values: the stale warm-up report and the
    # re-delivered copies add no points and do not pull the utilisation down
    assert evidence["resnet50"]["h100"]["samples"] == [
        [float(c), pytest.approx(util(RESNET_KNEE, c))] for c in RESNET_CORES
    ]
    # two nodes x 2 GPUs x 2c cores: c cores per GPU, not 2c
    assert [p[0] for p in evidence["bob/overfeat"]["*"]["samples"]] == OVERFEAT_CORES


def test_exactly_one_source(filled, tmp_path: Path) -> None:
    db, cfg = filled
    samples = tmp_path / "s.jsonl"
    samples.write_text(
        json.dumps({"key": "m", "gpu_type": "", "cores_per_gpu": 4, "gpu_util": 0.5})
    )
    out = ["--out", str(tmp_path / "t.tsv")]
    both = CliRunner().invoke(
        predict, ["build", "--samples", str(samples), "--from-store", str(db), *out]
    )
    neither = CliRunner().invoke(predict, ["build", *out])
    for res in (both, neither):
        assert res.exit_code == 2
        assert "exactly one of --samples FILE.jsonl or --from-store STORE.db" in res.output
    missing = CliRunner().invoke(predict, ["build", "--from-store", str(tmp_path / "no.db"), *out])
    assert missing.exit_code == 1 and "store not found" in missing.output
    assert not (tmp_path / "no.db").exists()  # read-only: a writable open would create it
    ok = CliRunner().invoke(predict, ["build", "--samples", str(samples), *out])
    assert ok.exit_code == 0, ok.output


def test_latest_report_per_node_is_taken_whatever_the_order() -> None:
    jobs = {1: record(1, "u", "n", "m")}
    final = report(1, "a", 1, 8, 0.8, H100, start=10.0, end=100.0)
    stale = report(1, "a", 1, 4, 0.2, H100, start=10.0, end=50.0)
    other = report(1, "b", 1, 8, 0.4, H100, start=10.0, end=60.0)
    for order in ([final, stale, other], [stale, other, final, stale, final]):
        got = samples_from_reports(order, jobs, {H100: "h100"}).samples
        assert len(got) == 1
        (s,) = got
        assert s.cores_per_gpu == 8.0 and s.gpu_type == "h100"
        # GPU-seconds weighted: node a 90 GPU-s at 0.8, node b 50 GPU-s at 0.4
        assert s.gpu_util == pytest.approx((90 * 0.8 + 50 * 0.4) / 140)
    mixed = [final, report(1, "b", 1, 8, 0.4, V100, start=10.0, end=60.0)]
    assert samples_from_reports(mixed, jobs, {H100: "h100"}).samples[0].gpu_type == ""


def naive_fit(points: list[tuple[float, float]], model: str, shape: float) -> tuple[float, float]:
    """Plateau and SSE of one curve by the textbook per-point formulas."""
    g = [min(1.0, c / shape) if model == "knee" else 1 - math.exp(-c / shape) for c, _ in points]
    plateau = sum(x * u for x, (_, u) in zip(g, points)) / sum(x * x for x in g)
    return plateau, sum((plateau * x - u) ** 2 for x, (_, u) in zip(g, points))


def test_fit_over_many_jobs_equals_the_per_point_least_squares() -> None:
    """The fit groups points by core count (one point per job makes many repeats); the
    result must be the per-point least-squares optimum all the same."""
    rng = random.Random(7)
    points = [
        (c, min(1.0, max(0.0, util(RESNET_KNEE, c) + rng.gauss(0, 0.05))))
        for c in rng.choices([1.0, 2.0, 3.0, 5.0, 8.0, 12.0], k=400)
    ]
    fit = fit_saturation(points, 16)
    grid = [0.25 * i for i in range(1, int(32 / 0.25) + 1)]
    best = min(
        ((naive_fit(points, m, s)[1], m, s) for m in ("knee", "exp") for s in grid),
        key=lambda t: (t[0], t[1] != "knee"),
    )
    assert (fit.model, fit.shape) == (best[1], best[2])
    assert fit.plateau == pytest.approx(naive_fit(points, fit.model, fit.shape)[0], rel=1e-9)
    assert fit.rmse == pytest.approx(math.sqrt(best[0] / len(points)), rel=1e-9)
    assert fit.n == 400


# ---- the service's periodic rebuild ----------------------------------------------------


def service_setup(tmp_path: Path, predictor_cfg: Path) -> tuple[ServiceConfig, ReplayClient, Path]:
    """A store that got its job records from the service's own pass over a Slurm snapshot,
    and reports as the HTTP endpoint adds them."""
    table = tmp_path / "predictor.tsv"
    cfg = ServiceConfig(
        store=str(tmp_path / "service.db"),
        port=0,
        predictor=PredictorServiceConfig(
            table=str(table), rebuild_every_s=600, config=str(predictor_cfg)
        ),
    )
    now = 2_000_000.0
    jobs = [
        Job(
            job_id=100 + i,
            name=f"rn{i}",
            user="alice",
            partition="gpu",
            state=JobState.RUNNING,
            gpus=2,
            submit_time=now - 3600,
            start_time=now - 1800,
            nodes=("g1",),
            comment="model=resnet50 elastic=1-4",
        )
        for i in range(len(RESNET_CORES))
    ]
    client = ReplayClient(jobs, [Node("g1", state="MIXED", cpus=64, gpus=8, gpus_alloc=8)])
    store = Store(cfg.store)
    try:
        Service(cfg, client, store).run_pass(now)
        store.add_reports(
            [
                report(100 + i, "g1", 2, 2 * c, util(RESNET_KNEE, c), H100)
                for i, c in enumerate(RESNET_CORES)
            ]
        )
    finally:
        store.close()
    return cfg, client, table


def serve_once(cfg: ServiceConfig, client: ReplayClient) -> int:
    """`Service.serve(once=True)` in a thread of its own, so it leaves the test runner's
    signal handlers alone (SQLite objects stay in the thread that made them)."""
    rc: list[int] = []

    def run() -> None:
        store = Store(cfg.store)
        try:
            rc.append(Service(cfg, client, store).serve(once=True))
        finally:
            store.close()

    t = threading.Thread(target=run)
    t.start()
    t.join(60)
    assert len(rc) == 1, "serve raised or hung"
    return rc[0]


def test_periodic_rebuild_writes_the_table_and_keeps_elastic_advice(tmp_path: Path) -> None:
    predictor_cfg = tmp_path / "predictor.toml"
    predictor_cfg.write_text(PREDICTOR_TOML)
    cfg, _, table = service_setup(tmp_path, predictor_cfg)
    # an admin's earlier `predict build --elastic` gave resnet50 3 GPUs
    table.write_text(render_table([TableRow("resnet50", "*", 4, 3)]))
    rebuild = PeriodicRebuild(cfg.predictor, cfg.store)
    summary = rebuild.run_if_due(now=0.0)
    assert summary is not None and summary.jobs == len(RESNET_CORES)
    assert rows(table) == {("resnet50", "h100"): 7, ("resnet50", "*"): 7}
    assert load_table(table).rows[("resnet50", "*")].gpus == 3  # carried over
    assert summary.kept_elastic == 1

    assert rebuild.run_if_due(now=599.0) is None  # not due yet
    assert rebuild.run_if_due(now=600.0) is not None
    assert PeriodicRebuild(PredictorServiceConfig(), cfg.store).run_if_due(0.0) is None  # off


def test_service_config_predictor_section() -> None:
    c = from_dict(ServiceConfig, {"predictor": {"table": "/t.tsv", "rebuild_every_s": 60}}, "s")
    assert c.predictor == PredictorServiceConfig("/t.tsv", 60.0, None)
    assert from_dict(ServiceConfig, {}, "s").predictor.table is None  # off by default
    for bad, key in (
        ({"rebuild_every_s": 0}, "predictor.rebuild_every_s"),
        ({"tabel": "x"}, "predictor.tabel"),
    ):
        with pytest.raises(ConfigError) as err:
            from_dict(ServiceConfig, {"predictor": bad}, "s.toml")
        assert err.value.key == key


def test_serve_rebuilds_after_a_pass(tmp_path: Path) -> None:
    predictor_cfg = tmp_path / "predictor.toml"
    predictor_cfg.write_text(PREDICTOR_TOML)
    cfg, client, table = service_setup(tmp_path, predictor_cfg)
    assert serve_once(cfg, client) == 0
    assert rows(table) == {("resnet50", "h100"): 7, ("resnet50", "*"): 7}


@pytest.mark.parametrize(
    "broken",
    [
        '[predictor]\nmax_cpus_per_gpu = "many"\n',  # wrong type
        f'[gpu_types]\n"{H100}" = "h 100"\n',  # not a gres type name
        "[predictor\n",  # not TOML
    ],
)
def test_broken_predictor_config_logs_and_keeps_the_old_table(
    tmp_path: Path, broken: str, caplog: pytest.LogCaptureFixture
) -> None:
    predictor_cfg = tmp_path / "predictor.toml"
    predictor_cfg.write_text(broken)
    cfg, client, table = service_setup(tmp_path, predictor_cfg)
    old = render_table([TableRow("resnet50", "*", 4, 0)])
    table.write_text(old)
    os.utime(table, (1, 1))
    with caplog.at_level(logging.INFO, logger="slurm_ext"):
        assert serve_once(cfg, client) == 0  # the service carried on
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "not rebuilt (previous table kept)" in errors[0].message
    assert str(predictor_cfg) in errors[0].message  # names the file
    assert table.read_text() == old and table.stat().st_mtime == 1
    assert not Path(f"{table}.evidence.json").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".predictor")] == []
    with pytest.raises(ValueError):
        rebuild_table(cfg.store, predictor_cfg, table)


def test_example_service_toml_predictor_section_is_the_defaults() -> None:
    path = Path(__file__).resolve().parents[1] / "etc" / "service.toml"
    text = path.read_text()
    assert "\n[predictor]\n" in text
    assert load_config(ServiceConfig, path).predictor == PredictorServiceConfig()
    # the commented example keys are real keys
    for key in ("table", "config"):
        assert f"\n# {key} = " in text
        assert key in {f.name for f in fields(PredictorServiceConfig)}
