"""Reading a job's progress file: the tail only, on real files and real processes, refusing
what a root agent must not follow or trust; the rate on hand-computed points."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodeagent.cgroups import read_proc_stat
from nodeagent.progress import (
    PROGRESS_ENV,
    TAIL_BYTES,
    ProgressFileError,
    ProgressReader,
    parse_tail,
    progress_rate,
    read_tail,
)

UID = os.getuid()


def lines(points) -> str:
    return "".join(f"{t:.3f} {c}\n" for t, c in points)


def test_parse_tail_skips_cut_and_unfinished_lines_and_keeps_the_run_after_a_restart():
    data = b"99.5 5\n1000.0 10\n1001.0 20\n1002.5 35\n1003.0 4"
    # not from the start: "99.5 5" may be a cut line ("999.5 5"); "1003.0 4" is still being written
    assert parse_tail(data, from_start=False) == [(1000.0, 10), (1001.0, 20), (1002.5, 35)]
    assert parse_tail(data, from_start=True)[0] == (99.5, 5.0)  # then it is a whole line
    assert parse_tail(b"", True) == [] and parse_tail(b"1000 5", True) == []
    restarted = b"1000 10\n1001 20\n1002 0\n1003 7\n\n1004 9\n"
    assert parse_tail(restarted, True) == [(1002.0, 0.0), (1003.0, 7.0), (1004.0, 9.0)]


@pytest.mark.parametrize(
    "bad",
    [
        b"1000 10\nhello world\n1002 30\n",
        b"1000 10 extra\n",
        b"1000 nan\n",
        b"inf 10\n",
        b"1000 -3\n",
        b"\xff\xfe 10\n",
    ],
)
def test_garbage_means_no_progress_known(bad):
    assert parse_tail(bad, from_start=True) is None


def test_rate_over_the_newest_five_seconds_capped_by_silence_then_stale():
    pts = [(1000.0 + i, 10.0 * i) for i in range(11)]  # 10/s, a line a second, t 1000..1010
    # the newest point >= 5 s before the last: t=1005; (100 - 50) / 5 = 10
    assert progress_rate(pts, now=1010.5) == pytest.approx(10.0)
    # silent since 1010: by 1014 at most one more line's worth (10): (50 + 10) / 9
    assert progress_rate(pts, now=1014.0) == pytest.approx(60 / 9)
    assert progress_rate(pts, now=1070.0) == pytest.approx(60 / 65)  # 60 s: still known
    assert progress_rate(pts, now=1070.5) is None  # stale: max(60 s, 20 x 1 s) of silence
    # fewer than three points, or no time between them: unknown
    assert progress_rate(pts[:2], now=1001.0) is None
    assert progress_rate([(1000.0, 1), (1000.0, 2), (1000.0, 3)], now=1000.0) is None
    # few points: the oldest two-or-more intervals back, (30 - 0) / 3
    assert progress_rate([(1000.0, 0), (1001.0, 10), (1003.0, 30)], 1003.0) == pytest.approx(10)
    # a slowdown shows within the window: 100/s then 40/s for the last 5 s -> 40
    slow = [(1000.0 + i, 100.0 * i) for i in range(6)]
    slow += [(1005.0 + i, 500.0 + 40.0 * i) for i in range(1, 6)]
    assert progress_rate(slow, now=1010.2) == pytest.approx(40.0)


def test_read_tail_reads_only_the_tail_of_a_huge_sparse_file(tmp_path):
    f = tmp_path / "progress"
    with open(f, "wb") as out:
        out.truncate(64 * 2**30)  # 64 GiB of zeros, no disk used: reading it all would hang
        out.seek(0, os.SEEK_END)
        out.write(lines([(1000.0 + i, i) for i in range(50)]).encode())
    t0 = time.monotonic()
    data, from_start = read_tail(str(f), UID)
    assert time.monotonic() - t0 < 1.0
    assert len(data) == TAIL_BYTES and not from_start
    pts = parse_tail(data, from_start)
    assert pts[-1] == (1049.0, 49.0) and len(pts) < 50  # the zeros are never reached
    small = tmp_path / "small"
    small.write_text(lines([(1000.0, 0), (1001.0, 5)]))
    assert read_tail(str(small), UID) == (small.read_bytes(), True)


def test_read_tail_refuses_symlinks_fifos_relative_paths_and_directories(tmp_path):
    target = tmp_path / "target"
    target.write_text("1000 1\n")
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(ProgressFileError, match="not a regular file"):  # the link itself
        read_tail(str(link), UID)
    with pytest.raises(ProgressFileError, match="not a regular file"):  # never really opened
        read_tail("/dev/null", 0)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no writer: a blocking open would hang the agent here
    with pytest.raises(ProgressFileError, match="not a regular file"):
        read_tail(str(fifo), UID)
    with pytest.raises(ProgressFileError, match="not a regular file"):
        read_tail(str(tmp_path), UID)
    with pytest.raises(ProgressFileError, match="not an absolute path"):
        read_tail("progress", UID)
    with pytest.raises(ProgressFileError, match="cannot open"):
        read_tail(str(tmp_path / "missing"), UID)


def test_read_tail_refuses_a_file_owned_by_another_user(tmp_path):
    f = tmp_path / "progress"
    f.write_text("1000 1\n")
    assert read_tail(str(f), UID)[0] == b"1000 1\n"
    if UID != 0:
        pytest.skip("chown to another user needs root")
    os.chown(f, 65534, 65534)  # nobody
    with pytest.raises(ProgressFileError, match="owned by uid 65534, not the job's uid 0"):
        read_tail(str(f), 0)
    assert read_tail(str(f), 65534)[0] == b"1000 1\n"


def _child_of(pid: int, timeout: float = 5.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        if kids:
            return int(kids[0])
        time.sleep(0.01)
    raise RuntimeError(f"process {pid} started no child")


def _procs(*pids: int) -> list[tuple[int, int]]:
    return [(p, read_proc_stat(p).start_ticks) for p in pids]


def test_reader_finds_the_file_exported_by_a_child_process_and_reads_its_rate(tmp_path):
    """As in the templates: the batch shell exports the variable, so only the training
    process it starts has it in its exec-time environment."""
    f = tmp_path / "progress"
    now = time.time()
    f.write_text(lines([(now - 10 + i, 25 * i) for i in range(11)]))  # 25/s
    script = f'export {PROGRESS_ENV}="{f}"; {sys.executable} -c "import time; time.sleep(60)"'
    shell = subprocess.Popen(["bash", "-c", script + "; true"])
    child = None
    try:
        child = _child_of(shell.pid)
        deadline = time.monotonic() + 5
        while PROGRESS_ENV.encode() not in Path(f"/proc/{child}/environ").read_bytes():
            assert time.monotonic() < deadline, "child did not exec"
            time.sleep(0.01)
        reader = ProgressReader()
        assert reader.rate(7, _procs(shell.pid), now) is None  # the shell alone: no file
        assert reader.rate(7, _procs(shell.pid, child), now) == pytest.approx(25.0)
        assert reader.jobs[7].path == str(f) and reader.jobs[7].uid == UID
        assert reader.jobs[7].checked == set()  # found: processes are not looked at again
        reader.forget([])
        assert reader.jobs == {}
    finally:
        if child is not None:
            os.kill(child, 9)
        shell.kill()
        shell.wait()


def test_reader_refuses_a_file_the_job_user_does_not_own_and_logs_once(tmp_path, caplog):
    if UID != 0:
        pytest.skip("starting a process as another user needs root")
    f = tmp_path / "progress"
    f.write_text(lines([(1000.0 + i, i) for i in range(10)]))  # root's file
    proc = subprocess.Popen(
        ["/bin/sleep", "60"],
        env={PROGRESS_ENV: str(f), "PATH": os.environ.get("PATH", "")},
        user=65534,  # the job runs as nobody and names root's file
    )
    try:
        deadline = time.monotonic() + 5
        while True:
            try:
                if PROGRESS_ENV.encode() in Path(f"/proc/{proc.pid}/environ").read_bytes():
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "child did not exec"
            time.sleep(0.01)
        reader = ProgressReader()
        with caplog.at_level(logging.WARNING, logger="nodeagent.progress"):
            for _ in range(3):
                assert reader.rate(8, _procs(proc.pid), 1009.0) is None
        assert reader.jobs[8].uid == 65534
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "owned by uid 0, not the job's uid 65534" in warnings[0]
        os.chown(f, 65534, 65534)  # the user's own file is read
        assert reader.rate(8, _procs(proc.pid), 1009.0) == pytest.approx(1.0)
    finally:
        proc.kill()
        proc.wait()


def test_reader_looks_the_path_up_in_the_jobs_own_mount_namespace(tmp_path):
    """A per-job /tmp (job_container/tmpfs, containers) is invisible from the agent's
    namespace; the file is read through /proc/PID/root of the process that named it."""
    if UID != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare(1)")
    private = tmp_path / "private"
    private.mkdir()
    f = private / "progress"
    body = lines([(1000.0 + i, 3 * i) for i in range(11)])
    script = (
        f"mount -t tmpfs none {private} && printf '{body}' > {f} && "
        f"exec env {PROGRESS_ENV}={f} sleep 60"
    )
    proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script])
    try:
        deadline = time.monotonic() + 5
        while PROGRESS_ENV.encode() not in Path(f"/proc/{proc.pid}/environ").read_bytes():
            assert time.monotonic() < deadline, "child did not exec"
            time.sleep(0.01)
        assert not f.exists()  # not in the agent's namespace
        reader = ProgressReader()
        assert reader.rate(9, _procs(proc.pid), 1010.0) == pytest.approx(3.0)
    finally:
        proc.kill()
        proc.wait()
