"""Co-location in simulated time: opportunistic jobs on GPU shards, governed by the agent.

Guaranteed jobs are scheduled by the unchanged engine (`Simulator`), whole GPUs, as if
the opportunistic jobs did not exist: a shard beside a guaranteed job takes nothing from
it. Opportunistic jobs wait in their own FIFO queue (first fit) for GPUs with a free shard
(`shards_per_gpu` jobs per GPU at most, gres/shard style) where memory fits: GPUs a
guaranteed job holds first, then idle ones (`on_idle`). A guaranteed job is given the
free GPUs of its nodes that carry no opportunistic job where it can.

On every node a simulated agent runs `policy.colocation.decide()` - the very function
the real agent runs - on what it would read: each job's utilisation (its solo demand x
its speed from `sharing.speeds`, 0 when paused), the GPU's memory (paused jobs keep
theirs) and power. Its pauses and resumes take effect at once (the real agent acts within
one sample, 5 s). With EaCO on, each verdict takes its slowdown and power from a
`ColocHistory` the simulated agents fill as jobs end, like the live service's store.

A job's speed is the slowest of its GPUs'; speeds, finish times and energy are updated
at every change. This is a subclass of the engine rather than a part of it so that the
engine stays untouched; it overrides `_start`, `_stop`, `_complete`, `_rekey`, `_pass` and
`_backfill` (Slurm's backfill pass starts jobs too).
"""

from __future__ import annotations

import heapq
import sqlite3
from collections.abc import Mapping, Sequence

from slurm_ext.policy import PolicyConfig
from slurm_ext.policy import colocation as co
from slurm_ext.policy import opportunistic as opp_rules
from slurm_ext.sim.coloc_agents import SimulatedAgents
from slurm_ext.sim.coloc_giveway import GiveWay
from slurm_ext.sim.coloc_history import ColocHistory, Observation
from slurm_ext.sim.coloc_model import (
    DEFAULT_SHARE,
    Gpu,
    GpuKey,
    ShareConfig,
    Track,
    kind_keys,
    profile_of,
    work_at,
)
from slurm_ext.sim.coloc_place import ShardPlacement
from slurm_ext.sim.engine import FINISH, INF, WAKE, SimConfig, SimJob, Simulator
from slurm_ext.sim.sharing import JobProfile
from slurm_ext.sim.traces import TraceJob


def _job_id(job: SimJob) -> int:
    return job.id


class SharingSimulator(SimulatedAgents, GiveWay, ShardPlacement, Simulator):
    def __init__(
        self,
        trace: Sequence[TraceJob],
        policy: PolicyConfig,
        cluster: SimConfig,
        share: ShareConfig = DEFAULT_SHARE,
        profiles: Mapping[int, JobProfile] | None = None,
    ) -> None:
        """`profiles`: job id -> profile, for the jobs it names (others are drawn)."""
        engine_jobs = trace if share.whole_gpus else [t for t in trace if not t.opportunistic]
        super().__init__(engine_jobs, policy, cluster)
        self.share = share
        self.trace = {t.job_id: t for t in trace}
        given = profiles or {}
        self.profile = {t.job_id: given.get(t.job_id) or profile_of(t, share) for t in trace}
        self.opp_queue: list[tuple[float, int, SimJob]] = []
        self.queued: set[SimJob] = set()
        self.on_shards: set[SimJob] = set()  # opportunistic jobs running on shards
        if share.whole_gpus:  # in the engine's queue too: whichever starts them first
            self.opp_jobs = [j for j in self.jobs if self.trace[j.id].opportunistic]
        else:
            self.opp_jobs = [SimJob(t, False) for t in trace if t.opportunistic]
            for j in self.opp_jobs:  # arrivals as wake-ups: the run loop calls _rekey
                self._push_event(j.submit, WAKE, j, j.key_ver)
        self.opp = set(self.opp_jobs)
        self.gpus: dict[GpuKey, Gpu] = {
            (n, i): Gpu() for n in self.node_names for i in range(cluster.gpus_per_node)
        }
        self.placed: dict[SimJob, list[GpuKey]] = {}
        self.track: dict[SimJob, Track] = {}
        self.paused: set[SimJob] = set()  # paused by any node's agent
        # each agent resumes only what it paused (it freezes the job's processes on its
        # own node, which stalls the whole job)
        self.node_paused: dict[str, set[SimJob]] = {n: set() for n in self.node_names}
        self.agents = {n: co.CoState() for n in self.node_names}
        self.changed: set[str] = set()  # nodes whose agent must look again
        self.stale = True  # occupants or pauses changed since the last `_respeed`
        # each active GPU's jobs' speeds, recomputed for the GPUs in `dirty_gpus` only
        self.gpu_speed: dict[GpuKey, dict[SimJob, float]] = {}
        self.dirty_gpus: set[GpuKey] = set()
        # what `_respeed` keeps per GPU and job, and the GPUs changed since it last ran
        self.respeed_gpus: set[GpuKey] = set()
        self.job_speed: dict[SimJob, float] = {}
        self.gpu_watts: dict[GpuKey, float] = {}  # active GPUs only
        self.gpu_busy: dict[GpuKey, float] = {}
        self.held_gpus: set[GpuKey] = set()
        self.seen_speed: dict[SimJob, float] = {}
        self._util_cache: dict[int, float | None] = {}
        self.coloc_history = ColocHistory(sqlite3.connect(":memory:"))
        self.t_last = 0.0
        self.energy_j = 0.0
        self.held_energy_j = 0.0  # GPUs that hold a job only (idle ones as if powered off)
        self.held_watts = 0.0
        self.holding = 0  # GPUs holding a job now
        self.held_gpu_s = 0.0  # integral of `holding`
        self.busy_gpu_s = 0.0  # integral of the GPUs' summed busy fraction
        self.watts = cluster.nodes * cluster.gpus_per_node * share.power.idle_w
        self.busy = 0.0
        self.pauses: dict[int, int] = {}
        self.resumes = 0
        self.refusals = 0
        self.shard_starts = 0  # opportunistic jobs started on shards (not whole GPUs)
        self.verdicts: dict[str, int] = {}  # EaCO verdicts by input source: learnt/configured
        self.stretch: dict[int, list[float]] = {}  # job id -> [wall at base rate, work]
        self.unjudged = 0  # guaranteed starts beside an opportunistic job already running
        self.paused_since: dict[int, float] = {}  # opportunistic job id -> pause time
        self.opp_requeues = 0  # paused past share.max_pause_s and requeued
        self.paused_by: dict[int, set[int]] = {}  # requeued job id -> guaranteed job ids
        self.span = (min((t.submit_time for t in trace), default=0.0), 0.0)

    # ---- time --------------------------------------------------------------------------
    def _advance(self, now: float) -> None:
        dt = now - self.t_last
        if dt > 0:
            self.energy_j += self.watts * dt
            self.held_energy_j += self.held_watts * dt
            self.busy_gpu_s += self.busy * dt
            self.held_gpu_s += self.holding * dt
            for tr in self.track.values():
                s = tr.sums
                base = 3 if tr.shared else 0
                s[base] += dt
                s[base + 1] += tr.util * dt
                s[base + 2] += tr.watts * dt
                if tr.shared:
                    s[6] += tr.speed * dt
            self.t_last = now

    def _progress(self, job: SimJob, now: float) -> float:
        return work_at(self.track[job], now)

    # ---- guaranteed jobs (engine hooks) ------------------------------------------------
    def _start(self, job: SimJob, alloc: list[tuple[str, int]], now: float) -> None:
        self._advance(now)
        super()._start(job, alloc, now)
        keys: list[GpuKey] = []
        for node, count in alloc:
            free = [k for k in self._node_gpus(node) if self.gpus[k].guaranteed is None]
            free.sort(key=lambda k: len(self.gpus[k].opp))  # clear GPUs first
            for k in free[:count]:
                g = self.gpus[k]
                g.guaranteed = job
                self._touch((k,))
                if job not in self.opp and any(o not in self.paused for o in g.opp):
                    self.unjudged += 1
                keys.append(k)
            self.changed.add(node)
        self.placed[job] = keys
        self.track[job] = Track(
            now, job.progress, 1.0 / job.slowdown, now + job.overhead, p_start=job.progress
        )

    def _stop(self, job: SimJob, now: float, release: bool = True) -> None:
        if job in self.on_shards:
            return
        self._advance(now)
        done = min(job.duration, self._progress(job, now))
        self._leave(job, now)
        super()._stop(job, now, release)
        job.progress = done

    def _complete(self, job: SimJob, now: float) -> None:
        if job in self.on_shards:
            self._advance(now)
            job.progress = min(job.duration, self._progress(job, now))
            self._leave(job, now)
            self.on_shards.discard(job)
            job.running = False
            job.finish = now
            job.run_ver += 1
            job.key_ver += 1
            if job.killed:
                job.timed_out = True
                self.timeouts += 1
            if self.share.whole_gpus:
                self.done += 1  # the engine counts it: it was in its trace
        else:
            super()._complete(job, now)
        self.span = (self.span[0], max(self.span[1], now))

    def _rekey(self, job: SimJob, now: float, wake: bool = False) -> None:
        if job in self.on_shards:
            # not the engine's while it runs on shards; a wake-up is its pause bound
            if wake and job.id in opp_rules.overdue(
                {job.id: self.paused_since.get(job.id, INF)}, now, self.share.max_pause_s
            ):
                self._requeue_paused(job, now)
            return
        if job in self.opp and job not in self.queued and job.finish is None:
            self.queued.add(job)  # queued for shards once, at arrival
            heapq.heappush(self.opp_queue, (job.submit, job.id, job))
        if job in self.opp and not self.share.whole_gpus:
            return
        super()._rekey(job, now, wake)

    def _pass(self, now: float, policy_acts: bool = True) -> None:
        super()._pass(now, policy_acts)
        self._settle(now)

    def _backfill(self, now: float) -> None:
        super()._backfill(now)  # Slurm's backfill pass (scheduler "slurm") starts jobs too
        self._settle(now)

    def _settle(self, now: float) -> None:
        """After the engine started jobs: agents look, shards are filled, speeds follow."""
        self._advance(now)
        self._agents()  # a new guaranteed job is sampled alone first
        self._place_opportunistic(now)
        self._agents()
        self._respeed(now)

    def _leave(self, job: SimJob, now: float) -> None:
        """Take a stopping job off its GPUs; its history goes to the store."""
        self._touch(self.placed.get(job, ()))
        for k in self.placed.pop(job, []):
            g = self.gpus[k]
            if g.guaranteed is job:
                g.guaranteed = None
            elif job in g.opp:
                g.opp.remove(job)
            self.changed.add(k[0])
        self.paused.discard(job)
        self.paused_since.pop(job.id, None)
        for held in self.node_paused.values():
            held.discard(job)
        tr = self.track.pop(job, None)
        self.seen_speed.pop(job, None)
        self.job_speed.pop(job, None)
        if tr is not None and now > tr.from_t:
            # wall seconds run (at the engine's own rate) against work done: the stretch
            # interference and pauses added to this job's run
            st = self.stretch.setdefault(job.id, [0.0, 0.0])
            base = 1.0 if job in self.on_shards else 1.0 / job.slowdown
            st[0] += (now - tr.from_t) * base
            st[1] += work_at(tr, now) - tr.p_start
        if tr is not None and (self.share.agent.eaco is not None or self.share.learnt_placement):
            self._util_cache.clear()
            s = tr.sums
            t = self.trace[job.id]
            self.coloc_history.record(
                [
                    Observation(
                        kind_keys(t),
                        alone_s=s[0],
                        alone_util=s[1] / s[0] if s[0] else 0.0,
                        alone_power_w=s[2] / s[0] if s[0] else 0.0,
                        shared_s=s[3],
                        shared_util=s[4] / s[3] if s[3] else 0.0,
                        shared_power_w=s[5] / s[3] if s[3] else 0.0,
                        shared_speed=min(1.5, s[6] / s[3]) if s[3] else 1.0,
                    )
                ]
            )
        self._respeed(now)

    def _respeed(self, now: float) -> None:
        """Recompute the running jobs' speeds, rates and finish times and the GPUs' power:
        all a function of the GPUs' occupants and the pauses, so only when those changed,
        and only for the GPUs that changed (`respeed_gpus`), the jobs on them and those
        jobs' other GPUs (a job runs at its slowest GPU's speed)."""
        if not self.stale:
            return
        self.stale = False
        per_gpu = self._speeds()
        power = self.share.power
        gpus, track, placed, paused = self.gpus, self.track, self.placed, self.paused
        jobs: set[SimJob] = set()
        for k in self.respeed_gpus:
            g = gpus[k]
            if g.guaranteed is not None:
                jobs.add(g.guaranteed)
            jobs.update(g.opp)
        job_speed = self.job_speed
        affected = set(self.respeed_gpus)
        self.respeed_gpus.clear()
        for j in jobs:
            keys = placed.get(j, ())
            affected.update(keys)
            sp = 1.0
            for k in keys:
                d = per_gpu.get(k)
                if d is not None and j in d and d[j] < sp:
                    sp = d[j]
            job_speed[j] = 0.0 if j in paused else sp
        on_affected: set[SimJob] = set()
        for k in sorted(affected):  # sorted: sums and events in the same order every run
            g = gpus[k]
            if g.guaranteed is not None or g.opp:
                self.held_gpus.add(k)
                if g.guaranteed is not None:
                    on_affected.add(g.guaranteed)
                on_affected.update(g.opp)
            else:
                self.held_gpus.discard(k)
            d = per_gpu.get(k)
            if d is None:
                self.gpu_watts.pop(k, None)
                self.gpu_busy.pop(k, None)
                continue
            b = sum(self.profile[j.id].util * job_speed[j] for j in d)
            self.gpu_busy[k] = min(1.0, b)
            self.gpu_watts[k] = power.watts(b)
        gpu_watts = self.gpu_watts
        watts = sum(gpu_watts.values())
        used = len(gpu_watts)
        self.watts = watts + (len(gpus) - used) * power.idle_w
        self.holding = len(self.held_gpus)
        self.held_watts = watts + (self.holding - used) * power.idle_w
        self.busy = sum(self.gpu_busy.values())
        for job in sorted(on_affected, key=_job_id):
            tr = track.get(job)
            if tr is None:
                continue
            s = job_speed.get(job, 0.0)
            keys = self.placed.get(job, [])
            tr.util = self.profile[job.id].util * s
            tr.watts = sum(gpu_watts.get(k, power.idle_w) for k in keys) / max(1, len(keys))
            tr.shared = s > 0 and any(len(per_gpu.get(k, ())) > 1 for k in keys)
            base = 1.0 if job in self.on_shards else 1.0 / job.slowdown
            rate = base * s
            if rate == tr.rate and s == tr.speed:
                continue
            tr.p0 = self._progress(job, now)
            tr.t0, tr.rate, tr.speed = now, rate, s
            job.run_ver += 1
            end = INF
            if rate > 0:
                end = max(now, tr.from_t) + max(0.0, job.duration - tr.p0) / rate
            # Slurm ends a stint at its time limit however slow (or paused) it ran
            kill = job.start + job.limit if self.slurm and job.limit is not None else INF
            job.killed = kill < end
            end = min(end, kill)
            if end < INF:
                self._push_event(max(now, end), FINISH, job, job.run_ver)
