"""`slurm-ext simulate` and `slurm-ext trace synth` through click."""

import json
from pathlib import Path

from click.testing import CliRunner

from slurm_ext.sim.cli import simulate, trace

DATA = Path(__file__).parent / "data"
TRACE = str(DATA / "tiresias-60job.csv")


def run(cmd, args):
    result = CliRunner().invoke(cmd, args)
    return result


def test_simulate_json_has_the_documented_keys():
    r = run(simulate, ["--trace", TRACE, "--nodes", "1", "--gpus-per-node", "8", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    for key in (
        "jobs", "avg_jct_s", "median_jct_s", "p95_jct_s", "p99_jct_s",
        "avg_queue_s", "makespan_s", "gpu_utilization", "preemptions",
    ):  # fmt: skip
        assert key in out
    assert out["jobs"] == 60 and out["policy"] == "gittins"
    assert 0 < out["gpu_utilization"] <= 1
    assert out["median_jct_s"] <= out["p95_jct_s"] <= out["p99_jct_s"]


def test_compare_table_and_plot(tmp_path):
    png = tmp_path / "cdf.png"
    r = run(
        simulate,
        [
            "--trace",
            TRACE,
            "--nodes",
            "1",
            "--gpus-per-node",
            "8",
            "--compare",
            "las,srtf",
            "--plot",
            str(png),
        ],
    )
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert "vs FIFO" in lines[0] and [ln.split()[0] for ln in lines[1:]] == ["fifo", "las", "srtf"]
    assert lines[1].split()[2] == "1.000"  # FIFO against itself
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_rows_stop_or_are_skipped(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text(Path(TRACE).read_text() + "60,1,1800,1,vgg16,oops,1\n")
    r = run(simulate, ["--trace", str(bad), "--nodes", "1", "--gpus-per-node", "8"])
    assert r.exit_code == 1 and "bad.csv:62:" in r.output
    r = run(
        simulate,
        ["--trace", str(bad), "--nodes", "1", "--gpus-per-node", "8", "--skip-bad", "--json"],
    )
    assert r.exit_code == 0 and json.loads(r.stdout)["skipped_rows"] == 1


def test_job_larger_than_cluster_is_a_clear_error():
    r = run(simulate, ["--trace", TRACE, "--nodes", "1", "--gpus-per-node", "4"])
    assert r.exit_code == 1 and "needs 8 GPUs, the cluster has 4" in r.output


def test_synth_is_seeded(tmp_path):
    a, b, c = (tmp_path / f"{x}.csv" for x in "abc")
    for path, seed in ((a, 1), (b, 1), (c, 2)):
        assert (
            run(trace, ["synth", "--jobs", "50", "--seed", str(seed), "-o", str(path)]).exit_code
            == 0
        )
    assert a.read_text() == b.read_text() != c.read_text()
    assert len(a.read_text().splitlines()) == 51


def test_registered_in_main_cli():
    from slurm_ext.cli import main

    assert {"simulate", "trace"} <= set(main.commands)
