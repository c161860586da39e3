"""`slurm-ext simulate` and `slurm-ext trace synth` through click."""

import json
from pathlib import Path

from click.testing import CliRunner

from slurm_ext.cli.sim import simulate
from slurm_ext.cli.trace import trace

DATA = Path(__file__).parent / "data"
TRACE = str(DATA / "tiresias-60job.csv")


def run(cmd, args):
    result = CliRunner().invoke(cmd, args)
    return result


def test_simulate_json_has_the_documented_keys():
    r = run(simulate, ["--trace", TRACE, "--nodes", "1", "--gpus-per-node", "8", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
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
    lines = r.stdout.splitlines()
    names = [ln.split()[0] for ln in lines[1:]]
    assert "vs Slurm" in lines[0] and names == ["slurm-alone", "fifo", "las", "srtf"]
    assert lines[1].split()[2] == "1.000"  # Slurm alone against itself
    assert lines[2].split()[3] == "1.000"  # FIFO against itself
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


def test_simulate_with_cpus(tmp_path):
    csv = tmp_path / "cpu.csv"
    csv.write_text(
        "job_id,num_gpu,submit_time,model_name,duration,cpus_per_gpu\n"
        "1,1,0,overfeat,1000,32\n"
        "2,1,10,resnet50,100,\n"  # even share: 40 / 4 = 10 cores
    )
    base = ["--trace", str(csv), "--nodes", "1", "--gpus-per-node", "4", "--policy", "fifo"]
    r = run(simulate, [*base, "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["makespan_s"] == 1000.0  # GPUs only: cores ignored
    r = run(simulate, [*base, "--cpus-per-node", "40", "--json"])
    assert r.exit_code == 0, r.output
    # job 1 runs at 32/40 speed to t=1250; job 2 waits for cores, ends at 1350
    assert json.loads(r.stdout)["makespan_s"] == 1350.0
    r = run(simulate, [*base, "--cpus-per-node", "40", "--cpu-knee", "overfeat=16", "--json"])
    assert json.loads(r.stdout)["makespan_s"] == 1100.0  # not starved: 1000, then job 2


def test_bad_cpu_options_are_clear_errors(tmp_path):
    base = ["--trace", TRACE, "--nodes", "1", "--gpus-per-node", "8"]
    r = run(simulate, [*base, "--cpus-per-node", "0"])
    assert r.exit_code == 2 and "--cpus-per-node" in r.output
    for bad in ("vgg16", "vgg16=x", "=4", "vgg16=-1"):
        r = run(simulate, [*base, "--cpus-per-node", "64", "--cpu-knee", bad])
        assert r.exit_code == 2 and "MODEL=CORES" in r.output, bad
    r = run(simulate, [*base, "--cpus-per-node", "4"])  # 8-GPU jobs need 8 x 1 cores
    assert r.exit_code == 1 and "cores on a node" in r.output
    csv = tmp_path / "bad.csv"
    csv.write_text("job_id,num_gpu,submit_time,duration,cpus_per_gpu\n1,1,0,10,0\n")
    r = run(simulate, ["--trace", str(csv), "--cpus-per-node", "8"])
    assert r.exit_code == 1 and "bad.csv:2: cpus_per_gpu must be > 0" in r.output


def test_scheduler_and_backfill_options(tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text(
        "job_id,num_gpu,submit_time,duration,time_limit\n"
        "1,2,0,500,1000\n"  # blocks the 4-GPU job until its limit (t=1000) for Slurm
        "2,4,1,100,200\n"
        "3,1,2,1000,2000\n"  # would delay job 2's reservation: waits under slurm
    )
    base = ["--trace", str(csv), "--nodes", "1", "--gpus-per-node", "4", "--policy", "fifo"]
    out = {}
    for sched in ("slurm", "greedy", "strict"):
        r = run(simulate, [*base, "--scheduler", sched, "--json"])
        assert r.exit_code == 0, r.output
        out[sched] = json.loads(r.stdout)
    for key in ("timeouts", "requeues", "lost_work_gpu_s", "preemptions"):
        assert key in out["slurm"]
    # slurm: 1 0..500, 2 500..600, 3 600..1600; greedy: 3 starts at 2 and delays 2 to 1002
    assert out["slurm"]["makespan_s"] == 1600.0 and out["greedy"]["makespan_s"] == 1102.0
    r = run(simulate, [*base, "--bf-window", "0.5", "--bf-max-job-test", "1", "--json"])
    assert r.exit_code == 0, r.output
    r = run(simulate, [*base, "--pass-interval", "60", "--checkpoint-interval", "600", "--json"])
    assert r.exit_code == 0, r.output


def test_willrun_window_option_reaches_the_backfill_model(tmp_path):
    # 4 x 4 GPUs full, limits ending at 1200, 1800, 600 (2 GPUs of the third node) and
    # 660; an 8-GPU job blocked, then a 2-GPU job (limit 1000) that fits on node 3 now.
    # Exact: the wide job holds nodes 3-4 from 660 and the 2-GPU job waits; in a batch of
    # a 600 s window it is planned on nodes 1-2 from 1800 and the 2-GPU job starts at 30
    csv = tmp_path / "w.csv"
    csv.write_text(
        "job_id,num_gpu,submit_time,duration,time_limit\n"
        "1,4,0,1200,1200\n2,4,0,1800,1800\n3,2,0,600,600\n4,4,0,660,660\n"
        "5,8,1,1000,3000\n6,2,2,900,1000\n"
    )
    base = ["--trace", str(csv), "--nodes", "4", "--gpus-per-node", "4", "--policy", "fifo"]
    jct = {}
    for extra in ([], ["--bf-willrun-window", "0"], ["--bf-willrun-window", "600"]):
        r = run(simulate, [*base, "--no-preemptive", *extra, "--json"])
        assert r.exit_code == 0, r.output
        jct[" ".join(extra)] = json.loads(r.stdout)["avg_jct_s"]
    assert jct[""] == jct["--bf-willrun-window 0"] > jct["--bf-willrun-window 600"]


def test_bad_scheduler_options_are_clear_errors():
    base = ["--trace", TRACE, "--nodes", "1", "--gpus-per-node", "8"]
    for opt, bad in (
        ("--scheduler", "fair"),
        ("--bf-window", "0"),
        ("--bf-interval", "-1"),
        ("--bf-max-job-test", "0"),
        ("--bf-resolution", "x"),
        ("--bf-willrun-window", "-1"),
        ("--bf-willrun-start", "last"),
        ("--pass-interval", "-5"),
        ("--checkpoint-interval", "-1"),
        ("--preemptible-fraction", "1.5"),
        ("--seed", "one"),
    ):
        r = run(simulate, [*base, opt, bad])
        assert r.exit_code == 2 and opt in r.output, (opt, r.output)


def test_compare_reports_slurm_alone_first():
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
            "gittins",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["compare"]
    assert [x["policy"] for x in rows] == ["slurm-alone", "fifo", "gittins"]
    assert rows[0]["vs_slurm"] == 1.0 and rows[0]["preemptions"] == 0
    assert all("vs_slurm" in x and "vs_fifo" in x for x in rows)
