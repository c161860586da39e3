"""Predictor core: curve fit, cores-per-GPU decisions, elastic DP, the table file, the CLI."""

from __future__ import annotations

import itertools
import json
import os
import random

import pytest
from click.testing import CliRunner

from slurm_ext.cli.predict import predict
from slurm_ext.core.config import ConfigError, from_dict
from slurm_ext.predict.cpu import CpuPredictorConfig, PredictorFile, decide_cpus
from slurm_ext.predict.curve import fit_saturation
from slurm_ext.predict.elastic import ElasticJob, allocate_elastic, amdahl_throughput
from slurm_ext.predict.samples import CpuSample, SampleError, load_samples
from slurm_ext.predict.table import (
    HEADER,
    TableError,
    TableRow,
    load_table,
    parse_table,
    render_table,
    write_table,
)

CFG = CpuPredictorConfig()


def knee_samples(key: str, gpu_type: str, sat: float, cores: list[float], noise: float, seed: int):
    rng = random.Random(seed)
    return [
        CpuSample(
            key, gpu_type, c, max(0.0, min(1.0, 0.9 * min(1.0, c / sat) + rng.gauss(0, noise)))
        )
        for c in cores
    ]


@pytest.mark.parametrize("sat", [7.0, 12.5, 40.0])
def test_fit_recovers_the_knee(sat: float) -> None:
    cores = [sat * f for f in (0.25, 0.5, 0.75, 1.0, 1.25, 1.5)]
    samples = knee_samples("m", "v100", sat, cores, 0.01, seed=int(sat))
    fit = fit_saturation([(s.cores_per_gpu, s.gpu_util) for s in samples], 64)
    assert abs(fit.plateau - 0.9) < 0.03
    assert abs(fit.cores_for(0.95) - 0.95 * sat) <= max(1.0, 0.08 * sat)


def test_exp_curve_is_fitted_as_exp() -> None:
    import math

    pts = [(c, 0.8 * (1 - math.exp(-c / 5.0))) for c in (1, 2, 4, 8, 16, 24)]
    fit = fit_saturation(pts, 64)
    assert fit.model == "exp" and abs(fit.shape - 5.0) < 0.3
    assert fit_saturation(pts, 64).cores_for(0.95) == pytest.approx(5.0 * math.log(20), rel=0.06)


def test_decisions_per_type_default_and_any_row() -> None:
    samples = (
        knee_samples("resnet50", "v100", 7, [2, 4, 6, 8, 10, 12], 0.01, 1)
        + knee_samples("resnet50", "p100", 4, [1, 2, 3, 4, 6, 8], 0.01, 2)
        + knee_samples("overfeat", "v100", 40, [8, 16, 24, 32, 40, 48], 0.01, 3)
        + [CpuSample("lonely", "v100", 4, 0.5)]
    )
    d = {(x.key, x.gpu_type): x for x in decide_cpus(samples, CFG)}
    assert d[("resnet50", "v100")].cpus_per_gpu in (6, 7, 8)
    assert d[("resnet50", "p100")].cpus_per_gpu in (3, 4, 5)
    assert d[("resnet50", "*")].cpus_per_gpu == d[("resnet50", "v100")].cpus_per_gpu
    assert d[("overfeat", "v100")].cpus_per_gpu in range(36, 42)
    assert d[("lonely", "v100")].source == "default"
    assert d[("lonely", "v100")].cpus_per_gpu == CFG.site_default_cpus_per_gpu
    flat = [CpuSample("flat", "", c, 0.0) for c in (1, 2, 4)]
    assert decide_cpus(flat, CFG)[0].source == "default"


def test_unsaturated_gets_the_maximum_and_large_need_is_clamped() -> None:
    cfg = CpuPredictorConfig(max_cpus_per_gpu=24, site_default_cpus_per_gpu=4)
    rising = knee_samples("big", "v100", 40, [4, 8, 12, 16], 0.0, 4)
    d = next(x for x in decide_cpus(rising, cfg) if x.gpu_type == "v100")
    assert d.cpus_per_gpu == 24 and "no plateau" in d.reason
    saturated = knee_samples("big", "v100", 40, [8, 16, 24, 32, 40, 48, 56], 0.0, 4)
    d = next(x for x in decide_cpus(saturated, cfg) if x.gpu_type == "v100")
    assert d.cpus_per_gpu == 24 and "clamped to 24" in d.reason


def test_config_errors_name_the_key() -> None:
    with pytest.raises(ConfigError, match="predictor"):
        from_dict(PredictorFile, {"predictor": {"saturation_fraction": 1.5}}, "p.toml")
    with pytest.raises(ConfigError, match="predictor.min_samples"):
        from_dict(PredictorFile, {"predictor": {"min_samples": "3"}}, "p.toml")


def brute_force(jobs: list[ElasticJob], free: int) -> float:
    best = 0.0
    options = [[0, *range(j.min_gpus, j.max_gpus + 1)] for j in jobs]
    for combo in itertools.product(*options):
        if sum(combo) <= free:
            best = max(best, sum(j.throughput[k - 1] for j, k in zip(jobs, combo) if k))
    return best


@pytest.mark.parametrize("seed", range(12))
def test_elastic_dp_matches_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    jobs = []
    for i in range(rng.randint(1, 4)):
        lo = rng.randint(1, 3)
        hi = rng.randint(lo, 5)
        jobs.append(ElasticJob(i, lo, hi, amdahl_throughput(rng.random(), hi, rng.uniform(0.5, 2))))
    free = rng.randint(0, 10)
    alloc = allocate_elastic(jobs, free)
    assert sum(alloc.values()) <= free
    for j in jobs:
        assert alloc[j.job_id] == 0 or j.min_gpus <= alloc[j.job_id] <= j.max_gpus
    got = sum(j.throughput[alloc[j.job_id] - 1] for j in jobs if alloc[j.job_id])
    assert got == pytest.approx(brute_force(jobs, free))


def test_elastic_prefers_the_job_that_scales() -> None:
    scales = ElasticJob(1, 1, 4, amdahl_throughput(0.0, 4))
    flat = ElasticJob(2, 1, 4, amdahl_throughput(0.9, 4))
    assert allocate_elastic([flat, scales], 5) == {2: 1, 1: 4}
    with pytest.raises(ValueError, match="throughput needs 4"):
        ElasticJob(3, 1, 4, (1.0, 2.0))
    with pytest.raises(ValueError, match="min_gpus"):
        ElasticJob(3, 0, 4, (1.0,) * 4)


HOSTILE_ROWS = [
    TableRow("a\tb", "v100", 4),
    TableRow("a\nb", "v100", 4),
    TableRow('x"); os.exit(1) --', "v100", 4),
    TableRow("]]..os.execute('id')..[[", "*", 4),
    TableRow("k" * 129, "*", 4),
    TableRow("ok", "v 100", 4),
    TableRow("ok", "", 4),
    TableRow("ok", "*", 0),
    TableRow("ok", "*", -3),
    TableRow("ok", "*", 10**12),
    TableRow("ok", "*", 4, gpus=-1),
    TableRow("ok", "*", True),  # type: ignore[arg-type]
    TableRow("ok", "*", 4.5),  # type: ignore[arg-type]
]


@pytest.mark.parametrize("row", HOSTILE_ROWS, ids=range(len(HOSTILE_ROWS)))
def test_writer_refuses_hostile_rows(row: TableRow) -> None:
    with pytest.raises(TableError, match="row 1"):
        render_table([TableRow("fine", "*", 4), row])


def test_writer_refuses_duplicates_and_round_trips(tmp_path) -> None:
    with pytest.raises(TableError, match="duplicate"):
        render_table([TableRow("a", "*", 4), TableRow("a", "*", 5)])
    rows = [
        TableRow("resnet50", "v100", 7, 0),
        TableRow("resnet50", "*", 7),
        TableRow("u/j", "*", 3, 2),
    ]
    t = parse_table(render_table(rows))
    assert t.valid and t.problems == [] and list(t.rows.values()) == rows
    assert t.lookup("resnet50", "a100") == rows[1] and t.lookup("resnet50", "v100") == rows[0]
    assert t.lookup("nope", None) is None


def test_reader_ignores_hostile_rows_and_malformed_files() -> None:
    good = "ok\t*\t4\t0"
    bad = [
        "a\tb\tv100\t4\t0",
        "x\t*\t-3\t0",
        "x\t*\t99999\t0",
        "x\t*\t4",
        "x\t*\t0x10\t0",
        "x\t*\t 4\t0",
        "x\t*\t4\t0\r",
        'x"]]\t*\t4\t0',
        "os.exit(1)\t*\t4\t0",
        "ok\t*\t9\t0",  # duplicate: first row wins
    ]
    text = "\n".join([HEADER, good, *bad, f"# end {1 + len(bad)}"]) + "\n"
    t = parse_table(text)
    assert t.valid and list(t.rows) == [("ok", "*")]
    assert t.rows[("ok", "*")].cpus_per_gpu == 4 and len(t.problems) == len(bad)
    for broken in (
        text[:-1],  # no final newline
        text.replace(HEADER, "# slurm-ext predictor table v2"),
        text.replace(f"# end {1 + len(bad)}", "# end 3"),
        "\n".join([HEADER, good]) + "\n",  # truncated before the trailer
        "",
        HEADER + "\n" + "x" * (1 << 20) + "\n# end 1\n",
    ):
        assert parse_table(broken).valid is False


def test_write_is_atomic_and_leaves_no_temp(tmp_path) -> None:
    samples = knee_samples("resnet50", "v100", 7, [2, 4, 6, 8, 10], 0.01, 5)
    path = tmp_path / "t.tsv"
    path.write_text("old")
    inode = os.stat(path).st_ino
    write_table(path, decide_cpus(samples, CFG))
    assert os.stat(path).st_ino != inode  # replaced by rename, not rewritten in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.tsv", "t.tsv.evidence.json"]
    assert load_table(path).valid and load_table(tmp_path / "missing").valid is False


def test_samples_file_errors_name_line_and_field(tmp_path) -> None:
    p = tmp_path / "s.jsonl"
    p.write_text(
        '{"key": "a", "gpu_type": "v100", "cores_per_gpu": 4, "gpu_util": 0.5}\n\n'
        '{"key": "a", "gpu_type": "v100", "cores_per_gpu": 4, "gpu_util": 1.5}\n'
    )
    with pytest.raises(SampleError, match=r"s.jsonl:3: gpu_util"):
        load_samples(p)
    p.write_text('{"key": "a b", "gpu_type": "v100", "cores_per_gpu": 4, "gpu_util": 0.5}\n')
    with pytest.raises(SampleError, match=r":1: key"):
        load_samples(p)


def test_cli_build_show_apply(tmp_path) -> None:
    samples = knee_samples("resnet50", "v100", 7, [2, 4, 6, 8, 10, 12], 0.01, 6)
    samples += knee_samples("overfeat", "v100", 40, [8, 16, 24, 32, 40, 48], 0.01, 7)
    sp = tmp_path / "s.jsonl"
    sp.write_text("".join(json.dumps(s.__dict__) + "\n" for s in samples))
    wl = tmp_path / "elastic.json"
    wl.write_text(
        json.dumps(
            [
                {
                    "key": "bert",
                    "min_gpus": 1,
                    "max_gpus": 4,
                    "throughput": list(amdahl_throughput(0.05, 4)),
                }
            ]
        )
    )
    table = tmp_path / "t.tsv"
    r = CliRunner().invoke(
        predict,
        [
            "build",
            "--samples",
            str(sp),
            "--out",
            str(table),
            "--elastic",
            str(wl),
            "--free-gpus",
            "3",
        ],
    )
    assert r.exit_code == 0, r.output
    t = load_table(table)
    assert t.rows[("bert", "*")].gpus == 3
    r = CliRunner().invoke(predict, ["elastic", "--workloads", str(wl), "--free-gpus", "2"])
    assert r.exit_code == 0 and r.output == "bert\t2\n"
    r = CliRunner().invoke(predict, ["show", "resnet50", "--table", str(table)])
    assert r.exit_code == 0 and "knee fit" in r.output and "samples" in r.output
    r = CliRunner().invoke(predict, ["show", "unknown", "--table", str(table)])
    assert "not in the table" in r.output
    job = {"comment": "model=overfeat", "tres_per_node": "gres:gpu:v100:1"}
    r = CliRunner().invoke(
        predict, ["apply", "--table", str(table), "--dry-run"], input=json.dumps(job)
    )
    out = json.loads(r.output)
    want = t.rows[("overfeat", "v100")].cpus_per_gpu
    assert out["changes"] == {"cpus_per_tres": f"gres:gpu:{want}"}
    r = CliRunner().invoke(
        predict, ["apply", "--table", str(table), "--dry-run"], input='{"cpus": 3}'
    )
    assert r.exit_code != 0 and "job.cpus: unknown field" in r.output
