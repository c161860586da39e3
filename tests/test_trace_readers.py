"""Trace readers: the shipped Tiresias trace, sacct exports, PAI tables, bad rows."""

from pathlib import Path

import pytest

from slurm_ext.sim.traces import TraceError, read_trace

DATA = Path(__file__).parent / "data"


def test_tiresias_60_job_trace():
    t = read_trace(DATA / "tiresias-60job.csv")
    assert len(t.jobs) == 60 and t.skipped == 0
    first = t.jobs[0]
    assert (first.job_id, first.gpus, first.submit_time, first.duration_s) == (0, 1, 0.0, 164.0)
    assert first.model_tag == "vgg19"
    assert sum(j.gpus for j in t.jobs) == 170  # awk -F, "NR>1{s+=$2}"
    assert [j.submit_time for j in t.jobs] == sorted(j.submit_time for j in t.jobs)


def test_bad_row_names_file_and_line(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text(
        "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
        "0,1,0,1,vgg16,100,1\n"
        "1,zero,5,1,vgg16,100,1\n"
        "2,2,9,1,resnet50,-3,1\n"
        "3,2,12,1,resnet50,50,1\n"
    )
    with pytest.raises(TraceError, match=r"t\.csv:3: "):
        read_trace(p)
    t = read_trace(p, skip_bad=True)
    assert [j.job_id for j in t.jobs] == [0, 3] and t.skipped == 2
    assert "t.csv:4: duration must be > 0" in t.problems[1]


def test_missing_columns(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("job_id,gpus\n1,2\n")
    with pytest.raises(TraceError, match="missing columns num_gpu, submit_time, duration"):
        read_trace(p)


def test_sacct_parsable2(tmp_path):
    p = tmp_path / "sacct.txt"
    p.write_text(
        "JobIDRaw|Submit|Start|End|AllocTRES|User|Partition|JobName\n"
        "101|2024-05-01T10:00:00|2024-05-01T10:05:00|2024-05-01T11:05:00|cpu=8,gres/gpu=4,mem=32G|ann|gpu|vgg16\n"
        "101.batch|2024-05-01T10:00:00|2024-05-01T10:05:00|2024-05-01T11:05:00|cpu=8,gres/gpu=4|||batch\n"
        "102|2024-05-01T10:10:00|2024-05-01T10:10:30|2024-05-01T10:20:30|cpu=2,gres/gpu:a100=1|bob|gpu|bert\n"
        "103|2024-05-01T10:11:00|Unknown|Unknown|cpu=2,gres/gpu=1|bob|gpu|never\n"
        "104|2024-05-01T10:12:00|2024-05-01T10:12:00|2024-05-01T10:13:00|cpu=2,mem=1G|bob|cpu|nogpu\n"
        "105|2024-05-01T10:13:00|2024-05-01T10:20:00|2024-05-01T10:10:00|gres/gpu=2|bob|gpu|x\n"
    )
    with pytest.raises(TraceError, match=r"sacct\.txt:7: End before Start"):
        read_trace(p, "sacct")
    t = read_trace(p, "sacct", skip_bad=True)
    assert t.skipped == 1
    a, b = t.jobs
    assert (a.job_id, a.gpus, a.submit_time, a.duration_s, a.user) == (101, 4, 0.0, 3600.0, "ann")
    assert (b.job_id, b.gpus, b.submit_time, b.duration_s) == (102, 1, 600.0, 600.0)


def test_pai_job_and_task_tables(tmp_path):
    (tmp_path / "pai_job_table.csv").write_text(
        "j1,i1,u1,Terminated,1000,5000\nj2,i2,u2,Terminated,1200,1300\nj3,i3,u3,Failed,1300,1400\n"
    )
    (tmp_path / "pai_task_table.csv").write_text(
        "j1,worker,2,Terminated,1010,4010,600,29,100,V100\n"
        "j1,ps,1,Terminated,1005,4000,600,29,50,V100\n"
        "j2,tensorflow,1,Terminated,1200,1260,600,29,25,T4\n"
        "j3,worker,1,Failed,1300,1400,600,29,100,V100\n"
    )
    t = read_trace(tmp_path, "pai")
    a, b = t.jobs
    assert (a.gpus, a.submit_time, a.duration_s) == (3, 0.0, 3005.0)  # 2x100% + 50% -> 3
    assert (b.gpus, b.submit_time, b.duration_s) == (1, 200.0, 60.0)
