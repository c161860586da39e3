"""One replay of one mode: submit the planned jobs on time, wait, read Slurm's records.

The loop is single-threaded: submit what is due (sbatch), poll squeue for our jobs once
a second, report progress on stderr. SIGINT/SIGTERM set a flag the loop checks; on any
exit the jobs it submitted are cancelled (by id, nothing else), and the caller stops the
service and the cluster it started.
"""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from slurm_ext.replay import payload
from slurm_ext.replay.plan import ReplayJob, sbatch_args
from slurm_ext.replay.records import (
    TERMINAL,
    JobRecord,
    RecordsError,
    SqueuePoller,
    read_sacct,
)
from slurm_ext.replay.target import Target

POLL_S = 1.0
PROGRESS_S = 5.0


class ReplayError(RuntimeError):
    """The replay could not go on (Slurm stopped answering, a submit was refused)."""


class Interrupted(ReplayError):
    """SIGINT or SIGTERM arrived; the replay cleaned up."""


@dataclass
class Replay:
    target: Target
    jobs: Sequence[ReplayJob]
    jobs_dir: Path
    checkpoint_wall_s: float
    label: str = ""
    say: Callable[[str], None] = lambda msg: print(msg, file=sys.stderr, flush=True)
    stop_event: threading.Event = field(default_factory=threading.Event)
    submitted: dict[int, ReplayJob] = field(default_factory=dict)  # Slurm id -> job

    # ---- submission -----------------------------------------------------------------
    def _argv(self, job: ReplayJob) -> list[str]:
        """The sbatch command line that runs `job`'s payload."""
        state = self.jobs_dir / f"{job.name}.ckpt"
        cmd = [
            sys.executable, "-I", payload.__file__,
            f"{job.work_wall_s:.3f}", f"{self.checkpoint_wall_s:.3f}", str(state),
        ]  # fmt: skip
        args = sbatch_args(job, self.target.partition, str(self.jobs_dir))
        return ["sbatch", *args, "--wrap=exec " + shlex.join(cmd)]

    def _sbatch(self, job: ReplayJob) -> int:
        argv = self._argv(job)
        try:
            res = subprocess.run(
                argv, env=self.target.env, capture_output=True, text=True, timeout=60, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise ReplayError(f"Slurm does not answer: sbatch for {job.name} timed out") from exc
        if res.returncode != 0:
            if self.stop_event.is_set():
                raise Interrupted("interrupted")
            raise ReplayError(f"sbatch refused {job.name}: {res.stderr.strip()}")
        return int(res.stdout.strip().split(";")[0])

    def _squeue(self) -> str:
        ids = ",".join(map(str, self.submitted))
        argv = ["squeue", "-h", "-t", "all", f"--jobs={ids}", "-o", SqueuePoller.FORMAT]
        try:
            res = subprocess.run(
                argv, env=self.target.env, capture_output=True, text=True, timeout=30, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise ReplayError("Slurm does not answer: squeue timed out after 30 s") from exc
        if res.returncode != 0 and "Invalid job id" not in res.stderr:
            raise ReplayError(f"Slurm does not answer: squeue: {res.stderr.strip()}")
        return res.stdout

    # ---- the loop -------------------------------------------------------------------
    def run(self) -> tuple[dict[int, JobRecord], float]:
        """Replay every job; return Slurm's records of them and the replay's start epoch."""
        previous = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                previous[sig] = signal.signal(sig, lambda *_: self.stop_event.set())
            except ValueError:  # not the main thread: the caller sets stop_event itself
                pass
        try:
            return self._loop()
        finally:
            self.cancel()
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _loop(self) -> tuple[dict[int, JobRecord], float]:
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        todo = sorted(self.jobs, key=lambda j: (j.submit_wall_s, j.trace.job_id))
        gpus: dict[int, int] = {}
        poller = SqueuePoller(gpus)
        epoch, t0 = time.time(), time.monotonic()
        next_poll = next_say = 0.0
        finished = 0
        i = 0
        while True:
            if self.stop_event.is_set():
                raise Interrupted("interrupted")
            now = time.monotonic() - t0
            while i < len(todo) and todo[i].submit_wall_s <= now:
                job_id = self._sbatch(todo[i])
                self.submitted[job_id] = todo[i]
                gpus[job_id] = poller.gpus[job_id] = todo[i].trace.gpus
                i += 1
            if self.submitted and now >= next_poll:
                poller.update(self._squeue(), time.time())
                finished = sum(
                    1
                    for j in self.submitted
                    if j in poller.records and poller.records[j].state in TERMINAL
                )
                next_poll = now + POLL_S
            if now >= next_say:
                self.say(f"{self.label}t={now:.0f}s submitted {i}/{len(todo)} finished {finished}")
                next_say = now + PROGRESS_S
            if i == len(todo) and finished == len(todo):
                break
            wait = min(next_poll, todo[i].submit_wall_s if i < len(todo) else next_poll) - now
            self.stop_event.wait(max(0.02, wait))
        self.say(f"{self.label}all {len(todo)} jobs finished after {time.monotonic() - t0:.0f}s")
        if not self.target.accounting:
            return poller.records, epoch
        return self._sacct(gpus, epoch, poller), epoch

    def _sacct(
        self, gpus: dict[int, int], epoch: float, poller: SqueuePoller
    ) -> dict[int, JobRecord]:
        """slurmdbd's records once it has every job's end (it lags slurmctld a little)."""
        deadline = time.monotonic() + 60
        while True:
            try:
                recs = read_sacct(self.target.env, self.submitted, epoch, gpus)
            except RecordsError as exc:
                self.say(f"{self.label}sacct failed ({exc}); using squeue's records")
                return poller.records
            if all(j in recs and recs[j].state in TERMINAL for j in self.submitted):
                return recs
            if time.monotonic() > deadline:
                self.say(
                    f"{self.label}slurmdbd lacks some job ends after 60 s; using squeue's records"
                )
                return poller.records
            time.sleep(1.0)

    def cancel(self) -> None:
        """Cancel the jobs this replay submitted that may still run (by id only), and check
        that Slurm took it: `scancel --quiet` says nothing when a request fails (a busy
        slurmctld), so what still waits or runs is cancelled again, three tries in all."""
        ids = [str(j) for j in self.submitted]
        for attempt in range(3):
            if not ids:
                return
            if attempt:
                time.sleep(1.0)
            try:
                for k in range(0, len(ids), 200):
                    subprocess.run(
                        ["scancel", "--quiet", *ids[k : k + 200]],
                        env=self.target.env, capture_output=True, timeout=30, check=False,
                    )  # fmt: skip
            except subprocess.TimeoutExpired:
                break
            ids = self._still_active(ids)
        if ids:
            self.say(
                f"{self.label}Slurm may still hold {len(ids)} of this replay's jobs;"
                f" cancel them with: scancel {' '.join(ids)}"
            )

    def _still_active(self, ids: Sequence[str]) -> list[str]:
        """Which of `ids` Slurm lists as pending, running or suspended ([] when squeue does
        not answer: nothing more can be done from here)."""
        argv = ["squeue", "-h", "-t", "PD,R,S,CF", f"--jobs={','.join(ids)}", "-o", "%i"]
        try:
            res = subprocess.run(
                argv, env=self.target.env, capture_output=True, text=True, timeout=30, check=False
            )
        except subprocess.TimeoutExpired:
            return []
        # (an id Slurm already purged makes squeue exit 1 but still list the others)
        return [line.strip() for line in res.stdout.splitlines() if line.strip()]
