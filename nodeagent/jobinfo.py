"""Trusted QOS and partition of the jobs on this node, from slurmctld.

A job's environment belongs to its user: a batch script that does `exec env
SLURM_JOB_PARTITION=gpu ...` rewrites the environment of the job's first process, which
is what the `environ` source reads. slurmctld's record of the job cannot be changed by
the user, so with `[jobs] source = "slurm"` the class of a job on a shared GPU comes
from there. One `squeue --json` answers for every job on the node; answers are cached
per job id so a steady node asks once per `cache_s`, not once per sample or per job.
"""

from __future__ import annotations

import logging
import pwd
import time
from collections.abc import Iterable
from dataclasses import dataclass

from nodeagent.cgroups import JobProcesses, proc_uid, without_pids
from slurm_ext.core.model import JobState
from slurm_ext.slurm.client import SlurmClient, SlurmError

log = logging.getLogger(__name__)

# COMPLETING: processes may linger while Slurm ends the job; it is still the same job.
STATES = ("RUNNING", "SUSPENDED", "COMPLETING")


@dataclass(frozen=True)
class JobInfo:
    """What slurmctld says about a job running on this node."""

    qos: str
    partition: str
    user: str = ""  # user name, or uid as text when Slurm gave no name


@dataclass(frozen=True)
class Lookup:
    """The answer for the jobs asked about. A job missing from `info` is unknown: Slurm did
    not answer yet, or says it is not running on this node; its class is the default."""

    info: dict[int, JobInfo]
    error: str | None = None  # this call tried Slurm and failed (for the error metric)


class SlurmJobInfo:
    """QOS and partition per job id from `SlurmClient.jobs()`, cached for `cache_s`.

    Slurm is asked only when a job id without an answer appears or an answer is older than
    `cache_s`; a job Slurm does not know is remembered as such for `cache_s` too, so a
    stray process claiming a job id cannot make the agent ask at every sample. After a
    failure the next try waits `cache_s` (a controller that times out would otherwise
    stall every sample); answers already held stay in use meanwhile. One warning per
    outage, one info line when Slurm answers again.
    """

    def __init__(self, client: SlurmClient, node: str, cache_s: float) -> None:
        self.client = client
        self.node = node
        self.cache_s = cache_s
        self._entries: dict[int, tuple[float, JobInfo | None]] = {}  # id -> (when, answer)
        self._next_try = float("-inf")
        self._down = False
        self._elsewhere_logged: set[int] = set()
        self._states_next_try = float("-inf")  # monotonic; see states()

    def lookup(self, job_ids: Iterable[int], now: float) -> Lookup:
        ids = set(job_ids)
        for job in [j for j in self._entries if j not in ids]:
            del self._entries[job]
        self._elsewhere_logged &= ids
        stale = any(
            j not in self._entries or now - self._entries[j][0] >= self.cache_s for j in ids
        )
        error = None
        if stale and now >= self._next_try:
            error = self._refresh(ids, now)
        info = {
            j: e[1] for j in ids if (e := self._entries.get(j)) is not None and e[1] is not None
        }
        return Lookup(info, error)

    def _refresh(self, ids: set[int], now: float) -> str | None:
        try:
            running = self.client.jobs(states=STATES)
        except (SlurmError, OSError) as exc:
            self._next_try = now + self.cache_s
            if not self._down:
                self._down = True
                log.warning(
                    "cannot ask Slurm for job QOS/partition (%s): jobs without an answer "
                    "get the default class until it answers",
                    exc,
                )
            return str(exc)
        if self._down:
            self._down = False
            log.info("Slurm answers again: job classes come from slurmctld")
        self._next_try = float("-inf")
        by_id = {j.job_id: j for j in running}
        for job_id in ids:
            job = by_id.get(job_id)
            answer = None
            if job is not None and self.node in job.nodes:
                answer = JobInfo(job.qos, job.partition, job.user)
            elif job_id not in self._elsewhere_logged:
                # a process outside any job cgroup names its job by SLURM_JOB_ID, which the
                # user controls; a job Slurm runs elsewhere (or not at all) is not trusted
                self._elsewhere_logged.add(job_id)
                where = ",".join(job.nodes) if job is not None else "nowhere"
                log.warning(
                    "job %s is not running on %s per Slurm (%s): default class",
                    job_id,
                    self.node,
                    where,
                )
            self._entries[job_id] = (now, answer)
        return None

    def states(self, job_ids: Iterable[int]) -> dict[int, str] | None:
        """Slurm's state of each job now (no cache: asked before thawing a job), "" for
        a job Slurm does not hold; None when Slurm cannot be asked, and for `cache_s`
        after a failure without asking again (a dead controller must not cost every
        sample a timeout)."""
        if time.monotonic() < self._states_next_try:
            return None
        try:
            jobs = self.client.jobs(states=tuple(s.value for s in JobState))
        except (SlurmError, OSError) as exc:
            self._states_next_try = time.monotonic() + self.cache_s
            log.warning("cannot ask Slurm for job states: %s", exc)
            return None
        by_id = {j.job_id: j.state.value for j in jobs}
        return {j: by_id.get(j, "") for j in job_ids}


def vouched(
    jobs: dict[int, JobProcesses], trusted: dict[int, JobInfo], proc_root: str = "/proc"
) -> tuple[dict[int, JobProcesses], list[tuple[int, int]]]:
    """The jobs less processes mapped only by SLURM_JOB_ID (no job cgroup) that slurmctld
    does not vouch for: anyone can set the variable, and a stray "guaranteed" process
    could get real jobs paused. `trusted` holds only jobs Slurm runs on this node; the
    process's user must also be the job's. Returns (kept jobs, dropped (pid, job))."""
    out: dict[int, JobProcesses] = {}
    dropped: list[tuple[int, int]] = []
    for job_id, jp in jobs.items():
        info = trusted.get(job_id)
        drop = {
            p
            for p in jp.environ_pids
            if info is None or not same_user(info.user, proc_uid(p, proc_root))
        }
        dropped += [(p, job_id) for p in sorted(drop)]
        kept = without_pids(jp, drop, proc_root) if drop else jp
        if kept.pids:
            out[job_id] = kept
    return out, dropped


def same_user(slurm_user: str, uid: int | None) -> bool:
    """Whether Slurm's user of a job (name, or uid as text) is the process's uid."""
    if uid is None or not slurm_user:
        return False
    if slurm_user == str(uid):
        return True
    try:
        return pwd.getpwuid(uid).pw_name == slurm_user
    except KeyError:
        return False
