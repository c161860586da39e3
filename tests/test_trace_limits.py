"""Trace readers: time limits, checkpoint and opportunistic flags (real-format strings)."""

import pytest

from slurm_ext.sim.traces import TraceError, read_trace
from slurm_ext.slurm.sacct import slurm_time_s


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1-00:00:00", 86400.0),
        ("2-12:30:00", 2 * 86400 + 12 * 3600 + 1800.0),
        ("02:00:00", 7200.0),
        ("30:00", 1800.0),
        ("45", 2700.0),
        ("3-04", 3 * 86400 + 4 * 3600.0),
        ("1-02:03", 86400 + 7200 + 180.0),
        ("UNLIMITED", None),
        ("Partition_Limit", None),
        ("", None),
    ],
)
def test_slurm_time_formats(text, seconds):
    assert slurm_time_s(text) == seconds


@pytest.mark.parametrize("text", ["1:2:3:4", "abc", "-5", "00:00", "1-", "9" * 40])
def test_bad_slurm_times_are_clear_errors(text):
    with pytest.raises(ValueError, match="Timelimit"):
        slurm_time_s(text)


SACCT = (
    "JobIDRaw|Submit|Start|End|AllocTRES|User|Partition|JobName|Timelimit|Comment\n"
    "101|2024-03-01T10:00:00|2024-03-01T10:01:00|2024-03-01T11:01:00|"
    "billing=8,cpu=8,gres/gpu=2,node=1|alice|gpu|train|02:00:00|model=bert checkpoint=1\n"
    "101.batch|2024-03-01T10:00:00|2024-03-01T10:01:00|2024-03-01T11:01:00|"
    "cpu=8,gres/gpu=2|||batch||\n"
    "102|2024-03-01T10:05:00|2024-03-01T10:06:00|2024-03-01T10:36:00|"
    "cpu=4,gres/gpu:a100=1,node=1|bob|gpu|eval|UNLIMITED|opportunistic=1\n"
    "103|2024-03-01T10:07:00|2024-03-01T10:08:00|2024-03-02T10:08:00|"
    "cpu=4,gres/gpu=4,node=1|carol|gpu|big|1-00:00:00|\n"
)


def test_sacct_reads_timelimit_and_comment_hints(tmp_path):
    p = tmp_path / "sacct.txt"
    p.write_text(SACCT)
    jobs = {j.job_id: j for j in read_trace(p, "sacct").jobs}
    assert sorted(jobs) == [101, 102, 103]
    assert jobs[101].time_limit_s == 7200.0 and jobs[101].checkpoint
    assert not jobs[101].opportunistic
    assert jobs[102].time_limit_s is None and jobs[102].opportunistic
    assert jobs[103].time_limit_s == 86400.0 and not jobs[103].checkpoint


def test_sacct_bad_timelimit_names_the_line(tmp_path):
    p = tmp_path / "sacct.txt"
    p.write_text(SACCT.replace("02:00:00", "2 hours"))
    with pytest.raises(TraceError, match=r"sacct.txt:2: Timelimit"):
        read_trace(p, "sacct")
    assert read_trace(p, "sacct", skip_bad=True).skipped == 1


def test_tiresias_optional_columns(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text(
        "job_id,num_gpu,submit_time,duration,time_limit,checkpoint,opportunistic\n"
        "1,2,0,100,3600,1,0\n"
        "2,1,5,50,,,1\n"
    )
    a, b = read_trace(p).jobs
    assert (a.time_limit_s, a.checkpoint, a.opportunistic) == (3600.0, True, False)
    assert (b.time_limit_s, b.checkpoint, b.opportunistic) == (None, False, True)
    p.write_text("job_id,num_gpu,submit_time,duration,checkpoint\n1,1,0,10,yes\n")
    with pytest.raises(TraceError, match="checkpoint must be 0 or 1"):
        read_trace(p)
    p.write_text("job_id,num_gpu,submit_time,duration,time_limit\n1,1,0,10,-5\n")
    with pytest.raises(TraceError, match="time_limit must be > 0"):
        read_trace(p)
