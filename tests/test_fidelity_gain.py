"""benchmarks/studies/fidelity_gain.py (the pooled live verdict) and fidelity_predict.py (a
replay's prediction): the statistics against known values, and both scripts on real
files and real simulations."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.studies.fidelity_gain import (
    PairedRun,
    read_run,
    report,
    sign_flip_p,
    t_statistic,
    t_two_sided_p,
)

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("t", "df", "p"),
    [(12.706, 1, 0.05), (2.306, 8, 0.05), (3.355, 8, 0.01), (2.571, 5, 0.05), (1.96, 10_000, 0.05)],
)
def test_t_p_value_matches_the_tables(t: float, df: int, p: float) -> None:
    assert t_two_sided_p(t, df) == pytest.approx(p, abs=5e-4)
    assert t_two_sided_p(-t, df) == pytest.approx(p, abs=5e-4)


def test_t_p_value_is_one_at_zero() -> None:
    assert t_two_sided_p(0.0, 4) == pytest.approx(1.0)


def test_t_statistic_and_sign_flip() -> None:
    assert t_statistic([1.0, 2.0, 3.0]) == pytest.approx(2.0 / (1.0 / math.sqrt(3)))
    # all of one sign: only the two all-same assignments reach |sum| = 6
    assert sign_flip_p([1.0, 2.0, 3.0]) == pytest.approx(2 / 8)
    assert sign_flip_p([1.0, -1.0]) == pytest.approx(1.0)
    assert sign_flip_p([-0.2, -0.3, -0.25, -0.1, -0.15]) == pytest.approx(2 / 32)


def write_run(root: Path, trace: str, slurm: float, service: float) -> None:
    for mode, jct in (("slurm", slurm), ("service", service)):
        d = root / trace / mode
        d.mkdir(parents=True)
        (d / "row.json").write_text(json.dumps({"avg_jct_s": jct, "mode": mode}))


def test_report_pools_runs(tmp_path: Path) -> None:
    write_run(tmp_path / "a", "users1", 20_000.0, 16_000.0)
    write_run(tmp_path / "b", "users1", 40_000.0, 40_000.0)
    write_run(tmp_path / "c", "users3", 60_000.0, 30_000.0)
    runs = [read_run(f"{t}={tmp_path / d}", "slurm", "service") for t, d in
            (("users1", "a"), ("users1", "b"), ("users3", "c"))]  # fmt: skip
    assert [r.ratio for r in runs] == pytest.approx([0.8, 1.0, 0.5])
    text = report(runs, "slurm", "service")
    assert "users1: 2 run(s), ratio of means 0.933, mean ratio 0.900" in text
    assert "mean ratio 0.767" in text
    assert "pooled ratio of means 0.717" in text  # 86,000 / 120,000
    assert "2 of 3 below 1" in text
    assert "df 2" in text


def test_bad_runs_name_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="expected TRACE=DIR"):
        read_run(str(tmp_path), "slurm", "service")
    with pytest.raises(SystemExit, match="no .*service/row.json"):
        (tmp_path / "users1" / "slurm").mkdir(parents=True)
        (tmp_path / "users1" / "slurm" / "row.json").write_text('{"avg_jct_s": 5}')
        read_run(f"users1={tmp_path}", "slurm", "service")
    (tmp_path / "users1" / "service").mkdir()
    (tmp_path / "users1" / "service" / "row.json").write_text('{"avg_jct_s": "x"}')
    with pytest.raises(SystemExit, match="avg_jct_s is 'x'"):
        read_run(f"users1={tmp_path}", "slurm", "service")


def test_paired_run_ratio() -> None:
    assert PairedRun("t", "d", 200.0, 150.0).ratio == pytest.approx(0.75)


def run_predict(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.studies.fidelity_predict", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def test_predict_simulates_both_modes_with_paired_members() -> None:
    out = run_predict(
        "--traces", "synth2", "--jobs", "30", "--modes", "slurm,service",
        "--speedup", "1500", "--sim-ensemble", "3",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    jct = {}
    for mode in ("slurm", "service"):
        line = next(x for x in lines if x.startswith(f"synth2 {mode} "))
        jct[mode] = float(line.split(": sim ")[1].split(" s")[0])
        assert "ensemble of 3: mean" in line
    ratio = next(x for x in lines if x.startswith("synth2 predicted service/slurm: "))
    assert float(ratio.split(": ")[1].split(";")[0]) == pytest.approx(
        jct["service"] / jct["slurm"], abs=1e-3
    )
    assert "paired members" in ratio and "of 3 below 1" in ratio


def test_predict_names_a_missing_prior(tmp_path: Path) -> None:
    (tmp_path / "users1").mkdir()
    out = run_predict(
        "--traces", "synth2", "--jobs", "20", "--speedup", "1500", "--modes", "slurm",
        "--prior", str(tmp_path),
    )  # fmt: skip
    assert out.returncode != 0
    assert f"no live run under {tmp_path / 'users1'}" in out.stderr
