"""A job's own progress rate, from the file it names in SLURM_EXT_PROGRESS_FILE.

The job appends lines "<unix time> <count>" (count: iterations or samples done so far,
never decreasing). The agent, running as root, reads only the last TAIL_BYTES of that
user-owned file: looked up with O_PATH|O_NOFOLLOW (no real open of whatever the path
names), refused unless it is a regular file owned by the UID of the process that named
it, then that inode read. Anything odd means "no progress known"
(logged once per job); a rate is only ever a slowdown signal that can pause the
opportunistic jobs beside the job, never anything that helps the job itself.
"""

from __future__ import annotations

import logging
import math
import os
import stat
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from nodeagent.cgroups import job_env_process, proc_uid

log = logging.getLogger(__name__)

PROGRESS_ENV = "SLURM_EXT_PROGRESS_FILE"
TAIL_BYTES = 512  # most the agent reads of a progress file per sample
WINDOW_S = 5.0  # the rate spans at least this much of the file's time, where it can
MIN_GAPS = 2  # ... and at least this many intervals between lines (three lines)
STALE_S = 60.0  # no new line for max(STALE_S, STALE_GAPS x usual gap): progress unknown
STALE_GAPS = 20
MAX_STUCK = 8  # progress reads left hanging at once (a hung mount), at most


class ProgressFileError(Exception):
    """The file may not or cannot be read (the message says why)."""


def read_tail(
    path: str, uid: int, max_bytes: int = TAIL_BYTES, root: str = ""
) -> tuple[bytes, bool]:
    """The last `max_bytes` of `path` and whether they start at the file's beginning.

    `root`: a prefix such as /proc/PID/root, so the path is looked up in the job's own
    mount namespace (a per-job /tmp, a container). Refuses (ProgressFileError) a relative
    path, a symlink, anything but a regular file, and a file not owned by `uid`. Never
    reads more than `max_bytes`.

    The path is the user's: it is first opened with O_PATH, which opens nothing (a device
    such as /dev/watchdog has side effects on a real open, and a FIFO would block), checked
    on that descriptor, and only then the same inode is opened for reading through
    /proc/self/fd, so swapping a path component in between gains nothing."""
    if not os.path.isabs(path):
        raise ProgressFileError("not an absolute path")
    try:
        ref = os.open(root + path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise ProgressFileError(f"cannot open: {exc.strerror or exc}") from None
    try:
        st = os.fstat(ref)
        if not stat.S_ISREG(st.st_mode):
            raise ProgressFileError("not a regular file")
        if st.st_uid != uid:
            raise ProgressFileError(f"owned by uid {st.st_uid}, not the job's uid {uid}")
        try:
            fd = os.open(f"/proc/self/fd/{ref}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise ProgressFileError(f"cannot open: {exc.strerror or exc}") from None
    finally:
        os.close(ref)
    try:
        st = os.fstat(fd)
        offset = max(0, st.st_size - max_bytes)
        try:
            data = os.pread(fd, max_bytes, offset)
        except OSError as exc:
            raise ProgressFileError(f"cannot read: {exc.strerror or exc}") from None
        return data, offset == 0
    finally:
        os.close(fd)


def parse_tail(data: bytes, from_start: bool) -> list[tuple[float, float]] | None:
    """(time, count) points of the complete lines in `data`; None when any is garbage.

    A first line cut by the tail window and a last line still being written (no newline)
    are skipped. When time or count goes backwards (a restarted job appending to the same
    file) only the points after the last step back are kept."""
    lines = data.split(b"\n")
    lines.pop()  # after the last newline: empty, or a line not finished yet
    if not from_start and lines:
        lines.pop(0)  # the window's cut probably fell inside it
    points: list[tuple[float, float]] = []
    for line in lines:
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 2:
            return None
        try:
            t, c = float(fields[0]), float(fields[1])
        except ValueError:
            return None
        if not (math.isfinite(t) and math.isfinite(c)) or t <= 0 or c < 0:
            return None
        if points and (t < points[-1][0] or c < points[-1][1]):
            points = []
        points.append((t, c))
    return points


def progress_rate(points: list[tuple[float, float]], now: float) -> float | None:
    """Count per second over the newest stretch of `points` (at least WINDOW_S and
    MIN_GAPS intervals where the points allow), or None when too few or stale.

    A job that stops writing is not taken at its last rate: by `now` it can have done at
    most one more line's worth (the mean count per line), so the rate is capped at
    (c1 - c0 + that) / (now - t0), which falls as the silence grows. After
    max(STALE_S, STALE_GAPS x mean interval) of silence the progress counts as unknown."""
    if len(points) < MIN_GAPS + 1:
        return None
    t1, c1 = points[-1]
    k = len(points) - 1 - MIN_GAPS
    while k > 0 and t1 - points[k][0] < WINDOW_S:
        k -= 1
    t0, c0 = points[k]
    gaps = len(points) - 1 - k
    if t1 <= t0:
        return None
    rate = (c1 - c0) / (t1 - t0)
    if now > t1:
        if now - t1 > max(STALE_S, STALE_GAPS * (t1 - t0) / gaps):
            return None
        rate = min(rate, (c1 - c0 + (c1 - c0) / gaps) / (now - t0))
    return rate


@dataclass
class _JobSource:
    checked: set[tuple[int, int]] = field(default_factory=set)  # (pid, start) looked at
    path: str | None = None
    uid: int | None = None
    proc: tuple[int, int] | None = None  # (pid, start) of the process that named the path
    warned: bool = False


class ProgressReader:
    """Per job: finds the progress file once (looking only at processes not seen
    before), then reads its tail at each sample, through /proc/PID/root of the process
    that named it (its mount namespace). When that process is gone the search starts
    again.

    The file may sit on a hung NFS or a user's FUSE mount, where a read never returns:
    each read runs on its own thread and is waited for at most `timeout_s`; a read still
    running then is abandoned (progress unknown), and that job's file is not read again
    until it returns. At most MAX_STUCK reads are left hanging at once, after which no
    progress file is read at all until one returns, so the threads stay bounded."""

    def __init__(
        self, proc_root: str = "/proc", max_bytes: int = TAIL_BYTES, timeout_s: float = 0.5
    ) -> None:
        self.proc_root = proc_root
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self.jobs: dict[int, _JobSource] = {}
        self.stuck: dict[int, threading.Thread] = {}  # job -> its abandoned read

    def rate(self, job_id: int, procs: Iterable[tuple[int, int]], now: float) -> float | None:
        """The job's progress rate, or None (no file named, unreadable, garbage, stale).
        `procs`: the job's (pid, start ticks); `now`: wall-clock unix time."""
        src = self.jobs.setdefault(job_id, _JobSource())
        procs = list(procs)
        if src.proc is not None and src.proc not in procs:  # exited: look again
            src.path = src.uid = src.proc = None
        if src.path is None:
            src.checked.intersection_update(procs)  # forget exited processes
            new = [p for p in procs if p not in src.checked]
            if not new:
                return None
            src.checked.update(new)
            found = job_env_process((pid for pid, _ in new), self.proc_root, PROGRESS_ENV)
            if found is None:
                return None
            pid, env = found
            uid = proc_uid(pid, self.proc_root)
            if uid is None:  # exited meanwhile
                return None
            src.path, src.uid = env[PROGRESS_ENV], uid
            src.proc = next(p for p in new if p[0] == pid)
            src.checked.clear()
            log.info("job %s: progress file %r (pid %s, uid %s)", job_id, src.path, pid, uid)
        assert src.uid is not None and src.proc is not None
        root = f"{self.proc_root}/{src.proc[0]}/root"
        try:
            got = self._bounded_read(job_id, src.path, src.uid, root)
        except ProgressFileError as exc:
            self._ignore(job_id, src, str(exc))
            return None
        if got is None:
            self._ignore(job_id, src, f"read did not finish within {self.timeout_s} s")
            return None
        data, from_start = got
        points = parse_tail(data, from_start)
        if points is None:
            self._ignore(job_id, src, 'not lines of "<unix time> <count>"')
            return None
        return progress_rate(points, now)

    def _bounded_read(
        self, job_id: int, path: str, uid: int, root: str
    ) -> tuple[bytes, bool] | None:
        """read_tail on a thread, waited for at most timeout_s; None when it is still
        running (or an earlier read of this job, or too many reads, still hang)."""
        for job in [j for j, t in self.stuck.items() if not t.is_alive()]:
            del self.stuck[job]
        if job_id in self.stuck or len(self.stuck) >= MAX_STUCK:
            return None
        box: list = []

        def read() -> None:
            try:
                box.append(read_tail(path, uid, self.max_bytes, root))
            except ProgressFileError as exc:
                box.append(exc)
            except Exception as exc:  # noqa: BLE001 - handed to the caller as a refusal
                box.append(ProgressFileError(f"cannot read: {exc}"))

        t = threading.Thread(target=read, name=f"progress-{job_id}", daemon=True)
        t.start()
        t.join(self.timeout_s)
        if t.is_alive():
            self.stuck[job_id] = t
            return None
        if isinstance(box[0], ProgressFileError):
            raise box[0]
        return box[0]

    def _ignore(self, job_id: int, src: _JobSource, why: str) -> None:
        if not src.warned:
            src.warned = True
            log.warning(
                "job %s: progress file %r ignored: %s (logged once per job)",
                job_id,
                src.path,
                why,
            )

    def forget(self, live_jobs: Iterable[int]) -> None:
        live = set(live_jobs)
        for job in [j for j in self.jobs if j not in live]:
            del self.jobs[job]
