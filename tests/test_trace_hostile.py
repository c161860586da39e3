"""Hostile trace input (issue 15, item 17): binary, non-UTF-8 and over-long lines and
fields are bad rows, named by file and line and skipped by --skip-bad, in every format."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from slurm_ext.sim.traces import MAX_LINE_BYTES, TraceError, read_trace

BIG = "x" * (MAX_LINE_BYTES + 10)
# (line payload, what the problem says) for each hostile line
HOSTILE = [
    (b"\xff\xfe\x00\x01garbage", "NUL"),
    (b"caf\xe9,\xc3\x28", "UTF-8"),
    (BIG.encode(), "longer than"),
]


def tiresias(bad: bytes) -> tuple[bytes, int]:
    head = b"job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
    return head + b"0,1,0,1,vgg16,100,1\n" + bad + b"\n" + b"3,2,12,1,resnet50,50,1\n", 3


def sacct(bad: bytes) -> tuple[bytes, int]:
    head = b"JobIDRaw|Submit|Start|End|AllocTRES|User|Partition|JobName\n"
    row = "{}|2024-01-01T00:00:{:02d}|2024-01-01T00:01:00|2024-01-01T00:02:00|gres/gpu=1|u|p|n\n"
    return head + row.format(1, 0).encode() + bad + b"\n" + row.format(2, 5).encode(), 3


def pai(tmp_path: Path, bad: bytes) -> tuple[Path, int]:
    (tmp_path / "pai_task_table.csv").write_bytes(
        b"j1,worker,1,Terminated,0,100,600,29300,100,V100\n"
        b"j2,worker,1,Terminated,10,90,600,29300,100,V100\n"
    )
    job = tmp_path / "pai_job_table.csv"
    job.write_bytes(b"j1,i1,u1,Terminated,0,100\n" + bad + b"\n" + b"j2,i2,u2,Terminated,10,90\n")
    return job, 2


def write(fmt: str, tmp_path: Path, bad: bytes) -> tuple[Path, int]:
    if fmt == "pai":
        return pai(tmp_path, bad)
    data, line = {"tiresias": tiresias, "sacct": sacct}[fmt](bad)
    path = tmp_path / f"trace.{fmt}"
    path.write_bytes(data)
    return path, line


@pytest.mark.parametrize("fmt", ["tiresias", "sacct", "pai"])
@pytest.mark.parametrize("bad,says", HOSTILE, ids=["binary", "latin1", "long"])
def test_a_hostile_line_is_a_bad_row_named_by_line(fmt, bad, says, tmp_path):
    path, line = write(fmt, tmp_path, bad)
    with pytest.raises(TraceError) as err:
        read_trace(path, fmt)
    assert f"{path.name}:{line}: " in str(err.value) and says in str(err.value)
    trace = read_trace(path, fmt, skip_bad=True)
    assert len(trace.jobs) == 2 and trace.skipped == 1, trace.problems


def test_a_quoted_field_over_the_bound_spanning_lines_is_a_bad_row(tmp_path):
    chunk = "y" * 1000
    field = "\n".join([chunk] * (MAX_LINE_BYTES // 1000 + 5))
    data, _ = tiresias(f'1,1,5,1,"{field}",100,1'.encode())
    path = tmp_path / "t.csv"
    path.write_bytes(data)
    trace = read_trace(path, skip_bad=True)
    # csv resumes inside the field: what follows it up to its end are bad rows too
    assert [j.job_id for j in trace.jobs] == [0, 3] and trace.skipped >= 1
    assert "field larger than field limit" in trace.problems[0]


def test_an_unreadable_header_is_an_error_not_a_traceback(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"\x00\x01\x02\n0,1,0,1,vgg16,100,1\n")
    with pytest.raises(TraceError, match=r"t\.csv:1: binary data"):
        read_trace(path)
    trace = read_trace(path, skip_bad=True)
    assert trace.jobs == [] and "t.csv:1: binary data" in trace.problems[0]


def test_the_cli_skips_hostile_rows(tmp_path):
    path, _ = write("tiresias", tmp_path, HOSTILE[1][0])
    res = subprocess.run(
        [sys.executable, "-m", "slurm_ext.cli", "simulate", "--trace", str(path),
         "--skip-bad", "--nodes", "1", "--gpus-per-node", "4"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    assert "skipped 1 bad rows" in res.stderr and "not UTF-8" in res.stderr
