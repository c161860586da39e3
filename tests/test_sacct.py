"""The sacct parser on real sacct output: what Slurm 22.05 and 25.11 printed for the
service's history command on a live accounting cluster (recorded by
`python -m slurm_ext.testing.record_sacct`), checked against what each job was by
construction; and the two readers (service history, simulator trace) agree on it."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from slurm_ext.core.model import CompletedJob
from slurm_ext.sim.traces import read_trace
from slurm_ext.slurm.history import completion_rows
from slurm_ext.slurm.pyslurm_mapping import completed_from_db
from slurm_ext.slurm.sacct import (
    SACCT_FIELDS,
    parse_header,
    parse_row,
    parse_sacct,
    sacct_argv,
)

DATA = Path(__file__).parent / "data"
RELEASES = ["22.05", "25.11"]


def recorded(release: str) -> tuple[str, dict[int, dict]]:
    text = (DATA / f"sacct_{release}_recorded.txt").read_text()
    truth = json.loads((DATA / f"sacct_{release}_truth.json").read_text())
    return text, {int(k): v for k, v in truth.items()}


@pytest.mark.parametrize("release", RELEASES)
def test_recorded_sacct_gives_the_gpu_jobs_that_ran_with_their_counts(release):
    text, truth = recorded(release)
    assert text.splitlines()[0] == "|".join(SACCT_FIELDS)  # what sacct_argv asks for
    jobs, problems = parse_sacct(text)
    assert problems == []
    by_id = {j.job_id: j for j in jobs}
    assert sorted(by_id) == sorted(j for j, t in truth.items() if t["kept"])
    for job_id, job in by_id.items():
        assert job.gpus == truth[job_id]["gpus"], job
        assert job.name == truth[job_id]["name"]
        assert job.user and job.partition == "gpu" and job.account
        assert job.submit_time <= job.start_time < job.end_time
        assert 1.0 <= job.run_s < 60.0
    assert by_id[_id(truth, "gres-two")].time_limit_s == 600.0
    assert by_id[_id(truth, "per-job-one")].time_limit_s == 86400.0
    # cancelled while pending: no AllocTRES; Start = End on 22.05, Start None on 25.11
    cancelled = _id(truth, "cancelled-pending")
    assert cancelled not in by_id


@pytest.mark.parametrize("release", RELEASES)
def test_history_rows_keep_the_end_sacct_gives(release):
    text, _ = recorded(release)
    jobs, _ = parse_sacct(text)
    rows = {r[0]: r for r in completion_rows(jobs)}
    for job in jobs:
        job_id, gpu_s, run_s, end, user, name, account, limit, gpus = rows[job.job_id]
        assert (gpu_s, run_s, end) == (job.gpus * job.run_s, job.run_s, job.end_time)
        assert gpus == (job.gpus or None)
        assert (user, name, account, limit) == (job.user, job.name, job.account, job.time_limit_s)


@pytest.mark.parametrize("release", RELEASES)
def test_the_simulator_reads_the_same_jobs_from_the_same_output(release, tmp_path):
    text, _ = recorded(release)
    path = tmp_path / "trace.sacct"
    path.write_text(text)
    trace = read_trace(path, "sacct", shift=False)
    jobs, _ = parse_sacct(text)
    assert [(t.job_id, t.gpus, t.submit_time, t.duration_s) for t in trace.jobs] == sorted(
        (j.job_id, j.gpus, j.submit_time, j.run_s) for j in jobs
    )


def _id(truth: dict[int, dict], name: str) -> int:
    return next(j for j, t in truth.items() if t["name"] == name)


def test_a_malformed_row_is_named_and_left_out():
    text = (
        "JobIDRaw|Submit|Start|End|AllocTRES\n"
        "1|2026-11-01T10:00:00|2026-11-01T10:01:00|2026-11-01T10:02:00|gres/gpu=1\n"
        "2|2026-11-01T10:00:00|2026-11-01T10:01:00|yesterday|gres/gpu=1\n"
        "3|2026-11-01T10:00:00|2026-11-01T10:01:00\n"
        "4|2026-11-01T10:00:00|2026-11-01T10:05:00|2026-11-01T10:02:00|gres/gpu=1\n"
        "5|2026-11-01T10:00:00|2026-11-01T10:05:00|2026-11-01T10:05:00|gres/gpu=1\n"
        "6|2026-11-01T10:00:00|Unknown|Unknown|gres/gpu=1\n"
        "7.batch|2026-11-01T10:00:00|2026-11-01T10:01:00|2026-11-01T10:02:00|gres/gpu=1\n"
    )
    jobs, problems = parse_sacct(text)
    assert [j.job_id for j in jobs] == [1]  # 5 ran no time, 6 never ran, 7.batch a step
    assert problems == [
        "line 3: End: not a time: 'yesterday'",
        "line 4: expected 5 fields, got 3",
        "line 5: End before Start (-180 s)",
    ]


def test_a_header_without_the_needed_columns_is_refused():
    with pytest.raises(ValueError, match="missing columns Start, End"):
        parse_header("JobIDRaw|Submit|AllocTRES")
    with pytest.raises(ValueError, match="missing columns AllocTRES"):
        parse_header("JobID|Submit|Start|End")
    cols = parse_header("JobID|Submit|Start|End|ReqTRES")  # older exports
    row = "5_3|2026-11-01T10:00:00|2026-11-01T10:00:00|2026-11-01T10:00:30|gres/gpu:a100=2"
    job = parse_row(cols, row)
    # JobID alone names an array task by its array job: the task gets its own id
    assert job is not None and (job.job_id, job.gpus, job.run_s) == (4 * 2**32 + 5, 2, 30.0)
    assert (job.array_job_id, job.array_task_id, job.gpu_type) == (5, 3, "a100")
    assert parse_sacct("") == ([], [])


def test_the_history_command_asks_for_ended_allocations_of_every_user():
    argv = sacct_argv(0.0)
    assert argv[0] == "sacct" and "--allusers" in argv and "--allocations" in argv
    assert f"--format={','.join(SACCT_FIELDS)}" in argv
    assert "--state=CD,F,TO,CA,OOM,NF" in argv
    assert "--endtime=now" in argv  # without it sacct finds nothing when --state is given


@pytest.mark.parametrize("release", RELEASES)
def test_a_pyslurm_db_job_maps_to_what_sacct_says_of_it(release):
    """pyslurm.db.Job-shaped records built from the recorded rows (pyslurm's attribute
    names and units: times in unix seconds, the limit in minutes, TRES as objects with a
    gres dict) give the same records as the parser."""
    text, _ = recorded(release)
    jobs, _ = parse_sacct(text)
    for job in jobs:
        db_job = SimpleNamespace(
            id=job.job_id,
            state="COMPLETED",
            submit_time=int(job.submit_time),
            start_time=int(job.start_time),
            end_time=int(job.end_time),
            allocated_tres=SimpleNamespace(gres={"gpu": SimpleNamespace(count=job.gpus)}),
            user_name=job.user,
            partition=job.partition,
            name=job.name,
            account=job.account,
            time_limit=int(job.time_limit_s // 60) if job.time_limit_s else "PartitionLimit",
            comment="",
        )
        assert completed_from_db(db_job) == job
    never_ran = SimpleNamespace(id=9, state="CANCELLED by 0", start_time=None, end_time=5)
    assert completed_from_db(never_ran) is None
    cpu_only = SimpleNamespace(
        id=10, state="COMPLETED", start_time=1, end_time=5, allocated_tres=None
    )
    assert completed_from_db(cpu_only) is None
    running = SimpleNamespace(id=11, state="RUNNING", start_time=1, end_time=None)
    assert completed_from_db(running) is None
    assert CompletedJob(1, 1, 0.0, 1.0, 3.0).run_s == 2.0
