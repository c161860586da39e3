"""Jobs as Slurm describes them in sacct exports: array tasks, steps, GPU types, QOS,
partitions, constraints, State; unique job ids or a clear error; one summary line per
read. The exports in tests/data are written in the exact format 22.05 and 25.11 print
(`sacct --parsable2`), one with JobID only and its steps (a raw export, no
--allocations), one as docs/simulator.md's export command asks (JobIDRaw, allocations).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, fields
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_ext.cli import main
from slurm_ext.core.model import CompletedJob
from slurm_ext.policy import PolicyConfig
from slurm_ext.sim.engine import STUCK_PASSES, SimConfig, SimulationStuck, Simulator
from slurm_ext.sim.state import WAKE
from slurm_ext.sim.traces import TraceError, TraceJob, read_trace
from slurm_ext.slurm.sacct import (
    NEVER_RAN,
    TRACE_FIELDS,
    array_task_job_id,
    parse_header,
    read_row,
)

DATA = Path(__file__).parent / "data"
GOLDEN = Path(__file__).parent / "golden" / "sacct_jobs.json"
JOBID_ONLY = DATA / "sacct_22.05_jobid_steps.txt"
JOBIDRAW = DATA / "sacct_25.11_jobidraw.txt"


def _described(j: TraceJob) -> tuple:
    """Everything but the id, which the two exports give differently."""
    return (
        j.array_job_id, j.array_task_id, j.gpus, j.gpu_type, j.partitions, j.qos,
        j.constraints, j.state, j.user, j.job_name, j.submit_time, j.duration_s,
        j.time_limit_s,
    )  # fmt: skip


def test_the_export_command_header_is_what_the_docs_ask_for():
    assert JOBIDRAW.read_text().splitlines()[0] == "|".join(TRACE_FIELDS)
    doc = (Path(__file__).parents[1] / "docs" / "simulator.md").read_text()
    assert f"--format={','.join(TRACE_FIELDS)}" in doc


def test_array_tasks_steps_types_and_qos_as_slurm_wrote_them():
    raw = read_trace(JOBIDRAW, "sacct", shift=False)
    cut = read_trace(JOBID_ONLY, "sacct", shift=False)
    # the same five GPU jobs that ran, whichever id column the export has
    assert [_described(j) for j in raw.jobs] == [_described(j) for j in cut.jobs]
    assert [j.job_id for j in raw.jobs] == [40001, 40002, 40003, 40004, 40007]
    # JobID alone: each array task its own id, above every Slurm id, never 40000
    assert [j.job_id for j in cut.jobs] == [
        array_task_job_id(40000, 1), array_task_job_id(40000, 2),
        array_task_job_id(40000, 3), 40004, 40007,
    ]  # fmt: skip
    assert min(j.job_id for j in cut.jobs[:3]) > 2**32
    task = raw.jobs[1]
    assert (task.array_job_id, task.array_task_id, task.state) == (40000, 2, "FAILED")
    assert (task.gpus, task.gpu_type, task.qos, task.constraints) == (2, "a100", "normal", "a100")
    llm = raw.jobs[3]
    assert (llm.gpus, llm.gpu_type, llm.qos, llm.partitions) == (4, "h100", "high", ("h100",))
    assert (llm.state, llm.time_limit_s, llm.duration_s) == ("TIMEOUT", 86400.0, 14400.0)
    untyped = raw.jobs[4]
    assert (untyped.gpus, untyped.gpu_type, untyped.qos) == (1, "", "low")
    assert cut.left_out == {"steps": 11, "CPU-only": 1, NEVER_RAN: 2}
    assert raw.left_out == {"CPU-only": 1, NEVER_RAN: 2}
    assert (cut.rows, raw.rows, cut.skipped, raw.skipped) == (19, 8, 0, 0)


def test_every_read_ends_with_one_summary_line():
    cut = read_trace(JOBID_ONLY, "sacct")
    assert cut.summary == (
        f"{JOBID_ONLY}: 19 rows read, 5 jobs used; left out: 1 CPU-only, 2 never ran, "
        "11 steps; GPU types: a100 (3), h100 (1); partitions: a100 (4), h100 (1)"
    )
    tiresias = read_trace(DATA / "tiresias-60job.csv")
    assert tiresias.summary == (
        f"{DATA / 'tiresias-60job.csv'}: 60 rows read, 60 jobs used; left out: none; "
        "GPU types: not given; partitions: not given"
    )


def test_bad_rows_are_counted_in_the_summary(tmp_path):
    path = tmp_path / "t.sacct"
    path.write_text(
        JOBIDRAW.read_text()
        + "40009|40009|2026-11-02T09:00:00|2026-11-02T09:00:05|yesterday|gres/gpu=1"
        "|eve|a100|normal|x|ml|01:00:00|COMPLETED|\n"
    )
    with pytest.raises(TraceError, match=r"t.sacct:10: End: not a time"):
        read_trace(path, "sacct")
    trace = read_trace(path, "sacct", skip_bad=True)
    assert trace.skipped == 1 and trace.rows == 9 and len(trace.jobs) == 5
    assert "left out: 1 CPU-only, 2 never ran, 1 bad;" in trace.summary


def test_a_job_id_read_twice_stops_the_read_naming_both_lines(tmp_path):
    lines = JOBIDRAW.read_text().splitlines()
    path = tmp_path / "dup.sacct"
    path.write_text("\n".join([*lines, lines[5].replace("|40004|", "|40004_9|")]) + "\n")
    for skip_bad in (False, True):
        with pytest.raises(TraceError) as err:
            read_trace(path, "sacct", skip_bad=skip_bad)
        assert str(err.value) == f"{path}:10: job id 40004 read twice: first at {path}:6"
    csv = tmp_path / "dup.csv"
    csv.write_text("job_id,num_gpu,submit_time,duration\n7,1,0,10\n8,1,0,10\n7,2,5,10\n")
    with pytest.raises(TraceError, match=r"dup.csv:4: job id 7 read twice: first at .*dup.csv:2"):
        read_trace(csv)


def test_array_tasks_cut_to_one_id_no_longer_hang_the_simulator(tmp_path):
    """The export that spun: JobID only, array tasks, steps. Before, every task read as
    its array's id; the backfill pass found the job it started by id, so it restarted a
    finished task again and again. Now each task has its own id and the run ends."""
    rows = ["JobID|Submit|Start|End|AllocTRES|User|Partition|JobName|State"]
    for task in range(6):
        start, end = f"2026-11-02T09:{task:02d}:00", f"2026-11-02T1{task}:00:00"
        tres = f"billing=4,cpu=4,gres/gpu:h100={1 + task % 2},gres/gpu={1 + task % 2},node=1"
        rows.append(f"500_{task}|2026-11-02T09:00:00|{start}|{end}|{tres}|u|gpu|a|COMPLETED")
        rows.append(f"500_{task}.batch|{start}|{start}|{end}|{tres}|||batch|COMPLETED")
    path = tmp_path / "arrays.sacct"
    path.write_text("\n".join(rows) + "\n")
    trace = read_trace(path, "sacct")
    assert len({j.job_id for j in trace.jobs}) == 6 and trace.left_out == {"steps": 6}
    done = Simulator(trace.jobs, PolicyConfig(), SimConfig(nodes=1, gpus_per_node=2)).run()
    assert all(j.finish is not None for j in done)


def test_the_simulator_refuses_two_jobs_with_one_id():
    jobs = [TraceJob(40000, 1, 0.0, 60.0), TraceJob(40000, 2, 5.0, 60.0)]
    with pytest.raises(ValueError, match="job id 40000 is given to two jobs"):
        Simulator(jobs, PolicyConfig(), SimConfig(nodes=1, gpus_per_node=2))


class _Spinning(Simulator):
    """A run that never moves on: after each pass it files a wake-up for every waiting
    job at the same time, so the loop turns at that time for ever, starting nothing."""

    def _pass(self, now: float, policy_acts: bool = True) -> None:
        super()._pass(now, policy_acts)
        for job in self.jobs:
            if job.first_start is None and job.submit <= now:
                self.state.push_event(now, WAKE, job, job.key_ver)


def test_a_run_without_progress_stops_naming_the_job_and_the_time():
    jobs = [TraceJob(1, 2, 0.0, 600.0), TraceJob(2, 2, 10.0, 60.0)]  # 2 waits for 1
    sim = _Spinning(jobs, PolicyConfig(), SimConfig(nodes=1, gpus_per_node=2))
    with pytest.raises(SimulationStuck) as err:
        sim.run()
    assert str(err.value) == (
        f"no progress at t=10 s: {STUCK_PASSES} passes in a row started and ended no job "
        "(job 2 waits first)"
    )
    # the same jobs without the spin run to their end
    done = Simulator(jobs, PolicyConfig(), SimConfig(nodes=1, gpus_per_node=2)).run()
    assert [j.finish for j in done] == [600.0, 660.0]


def test_a_finished_job_started_again_stops_the_run():
    """What the shared ids did: the backfill pass started a job by id, a finished one."""
    sim = Simulator([TraceJob(1, 1, 0.0, 60.0)], PolicyConfig(), SimConfig(nodes=1))
    (job,) = sim.run()
    with pytest.raises(SimulationStuck, match="job 1 started at t=70 s after it finished"):
        sim._start(job, [("n0", 1)], 70.0)


def test_the_sacct_columns_each_read():
    cols = parse_header("JobID|Submit|Start|End|ReqTRES|ReqGRES|Partition|Reservation|QOS")
    t = "2026-11-02T09:00:00|2026-11-02T09:00:01|2026-11-02T09:10:01"
    job = read_row(cols, f"77|{t}|cpu=2,gres/gpu=2|gpu:v100:2|a100,h100|maint|debug")
    assert isinstance(job, CompletedJob)
    assert (job.gpus, job.gpu_type, job.reservation, job.qos) == (2, "v100", "maint", "debug")
    assert job.partitions == ("a100", "h100") and job.partition == "a100,h100"
    typed = read_row(cols, f"78|{t}|gres/gpu:a100=1,gres/gpu:h100=2||gpu||")
    assert isinstance(typed, CompletedJob) and (typed.gpus, typed.gpu_type) == (3, "a100,h100")
    # a pending array record names several tasks: never one job that ran
    assert read_row(cols, "79_[1-5%2]|2026-11-02T09:00:00|None|None|gres/gpu=1||gpu||") == (
        NEVER_RAN
    )
    with pytest.raises(ValueError, match=r"JobID '79_\[1-5%2\]' names several array tasks"):
        read_row(cols, f"79_[1-5%2]|{t}|gres/gpu=1||gpu||")
    with pytest.raises(ValueError, match=r"JobID: not a job id: '80\+0'"):
        read_row(cols, f"80+0|{t}|gres/gpu=1||gpu||")
    # a `|` inside a field: kept only in the last column, Constraints
    last = parse_header("JobIDRaw|Submit|Start|End|AllocTRES|Constraints")
    job = read_row(last, f"81|{t}|gres/gpu=1|a100|h100")
    assert isinstance(job, CompletedJob) and job.constraints == "a100|h100"
    mid = parse_header("JobIDRaw|Submit|Start|End|AllocTRES|Constraints|QOS")
    with pytest.raises(ValueError, match="expected 7 fields, got 8"):
        read_row(mid, f"82|{t}|gres/gpu=1|a100|h100|normal")


def test_completed_job_keeps_its_first_fields_in_place():
    names = [f.name for f in fields(CompletedJob)]
    assert names[:11] == [
        "job_id", "gpus", "submit_time", "start_time", "end_time", "user", "partition",
        "name", "account", "time_limit_s", "comment",
    ]  # fmt: skip


def test_golden_parsed_jobs():
    """The 25.11 export's jobs as read (times from the first submit): a change to what
    the reader makes of them shows here. SLURM_EXT_REGOLD=1 rewrites the record."""
    got = [asdict(j) for j in read_trace(JOBIDRAW, "sacct").jobs]
    if os.environ.get("SLURM_EXT_REGOLD"):
        GOLDEN.write_text(json.dumps(got, indent=1) + "\n")
    assert got == json.loads(GOLDEN.read_text())


def test_the_cli_prints_the_summary_and_the_duplicate_error(tmp_path):
    res = CliRunner().invoke(
        main,
        ["simulate", "--trace", str(JOBID_ONLY), "--format", "sacct", "--nodes", "2",
         "--gpus-per-node", "4", "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert res.stderr.splitlines() == [read_trace(JOBID_ONLY, "sacct").summary]
    json.loads(res.stdout)
    dup = tmp_path / "dup.csv"
    dup.write_text("job_id,num_gpu,submit_time,duration\n7,1,0,10\n7,2,5,10\n")
    res = CliRunner().invoke(main, ["simulate", "--trace", str(dup)])
    assert res.exit_code == 1
    assert f"{dup}:3: job id 7 read twice: first at {dup}:2" in res.stderr


def test_the_cli_exits_1_with_the_stuck_message(monkeypatch):
    monkeypatch.setattr("slurm_ext.sim.run.Simulator", _Spinning)
    res = CliRunner().invoke(
        main,
        ["simulate", "--trace", str(JOBIDRAW), "--format", "sacct", "--nodes", "1",
         "--gpus-per-node", "4", "--policy", "fifo"],
    )  # fmt: skip
    assert res.exit_code == 1, res.output
    assert "Error: no progress at t=" in res.stderr and "passes in a row" in res.stderr
