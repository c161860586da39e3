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
engine stays untouched; it extends the engine's job transitions `_start`, `_stop`,
`_complete`, `_rekey`, `_pass` and `_backfill` (Slurm's backfill pass starts jobs too),
which the engine's parts call too. Its own parts: the GPUs' occupants (`GpuShares`) and
power (`Meter`) in sim/coloc_gpus.py, the agents (sim/coloc_agents.py) and where a job
goes on shards (sim/coloc_place.py, with sim/coloc_giveway.py's offer rule).
"""

from __future__ import annotations

import heapq
import sqlite3
from collections.abc import Mapping, Sequence

from slurm_ext.policy import PolicyConfig
from slurm_ext.policy import opportunistic as opp_rules
from slurm_ext.sim.cluster import Alloc
from slurm_ext.sim.coloc_agents import SimulatedAgents, Speeds
from slurm_ext.sim.coloc_gpus import GpuShares, Meter
from slurm_ext.sim.coloc_history import ColocHistory, Observation
from slurm_ext.sim.coloc_model import (
    DEFAULT_SHARE,
    GpuKey,
    ShareConfig,
    Track,
    kind_keys,
    profile_of,
    work_at,
)
from slurm_ext.sim.coloc_place import ShardPlacement
from slurm_ext.sim.engine import SimConfig, SimJob, Simulator
from slurm_ext.sim.sharing import JobProfile
from slurm_ext.sim.state import FINISH, INF, WAKE
from slurm_ext.sim.traces import TraceJob

__all__ = ["ShareConfig", "SharingSimulator"]


def _job_id(job: SimJob) -> int:
    return job.id


class SharingSimulator(Simulator):
    """The engine with opportunistic jobs on GPU shards beside it (module docstring)."""

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
        self.opp_queue: list[tuple[float, int, SimJob]] = []  # FIFO for shards
        self.queued: set[SimJob] = set()
        self.on_shards: set[SimJob] = set()  # opportunistic jobs running on shards
        if share.whole_gpus:  # in the engine's queue too: whichever starts them first
            self.opp_jobs = [j for j in self.jobs if self.trace[j.id].opportunistic]
        else:
            self.opp_jobs = [SimJob(t, False) for t in trace if t.opportunistic]
            for j in self.opp_jobs:  # arrivals as wake-ups: the run loop calls _rekey
                self.state.push_event(j.submit, WAKE, j, j.key_ver)
        self.opp = set(self.opp_jobs)
        self.shares = GpuShares.of(self.cluster.node_names, cluster.gpus_per_node)
        self.coloc_history = ColocHistory(sqlite3.connect(":memory:"))
        self.agents = SimulatedAgents(
            self.shares, share, self.profile, self.trace, self.opp, self.coloc_history, self.state
        )
        self.placement = ShardPlacement(
            self.shares, share, self.profile, self.trace, self.coloc_history,
            self.cluster.node_names,
        )  # fmt: skip
        idle_w = cluster.nodes * cluster.gpus_per_node * share.power.idle_w
        self.meter = Meter(idle_w, self.shares.track)
        self.job_speed: dict[SimJob, float] = {}  # each running job's speed (`_respeed`)
        self.shard_starts = 0  # opportunistic jobs started on shards (not whole GPUs)
        self.stretch: dict[int, list[float]] = {}  # job id -> [wall at base rate, work]
        self.unjudged = 0  # guaranteed starts beside an opportunistic job already running
        self.opp_requeues = 0  # paused past share.max_pause_s and requeued
        self.span = (min((t.submit_time for t in trace), default=0.0), 0.0)

    # ---- time --------------------------------------------------------------------------
    def _progress(self, job: SimJob, now: float) -> float:
        return work_at(self.shares.track[job], now)

    # ---- guaranteed jobs (engine hooks) ------------------------------------------------
    def _start(self, job: SimJob, alloc: Alloc, now: float) -> None:
        self.meter.advance(now)
        super()._start(job, alloc, now)
        sh = self.shares
        keys: list[GpuKey] = []
        for node, count in alloc:
            free = [k for k in sh.node_gpus(node) if sh.gpus[k].guaranteed is None]
            free.sort(key=lambda k: len(sh.gpus[k].opp))  # clear GPUs first
            for k in free[:count]:
                g = sh.gpus[k]
                g.guaranteed = job
                sh.touch((k,))
                if job not in self.opp and any(o not in sh.paused for o in g.opp):
                    self.unjudged += 1
                keys.append(k)
            sh.changed.add(node)
        sh.placed[job] = keys
        sh.track[job] = Track(
            now, job.progress, 1.0 / job.slowdown, now + job.overhead, p_start=job.progress
        )

    def _stop(self, job: SimJob, now: float, release: bool = True) -> None:
        if job in self.on_shards:
            return
        self.meter.advance(now)
        done = min(job.duration, self._progress(job, now))
        self._leave(job, now)
        super()._stop(job, now, release)
        job.progress = done

    def _complete(self, job: SimJob, now: float) -> None:
        if job in self.on_shards:
            self.meter.advance(now)
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
            since = self.shares.paused_since.get(job.id, INF)
            if wake and job.id in opp_rules.overdue({job.id: since}, now, self.share.max_pause_s):
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
        self.meter.advance(now)
        self.agents.look(self.meter.t_last)  # a new guaranteed job is sampled alone first
        self._place_opportunistic(now)
        self.agents.look(self.meter.t_last)
        self._respeed(now)

    # ---- opportunistic jobs ------------------------------------------------------------
    def _place_opportunistic(self, now: float) -> None:
        """Start the queued opportunistic jobs that find shards, first come first."""
        keep = []
        while self.opp_queue:
            entry = heapq.heappop(self.opp_queue)
            job = entry[2]
            if job.running or job.finish is not None or job.stints > 0:
                continue  # the engine gave it whole GPUs: it stays the engine's
            limit = self.share.max_shard_gpus
            if limit and job.gpus > limit and self.share.whole_gpus:
                continue  # whole GPUs only
            keys = self.placement.find(job, self.meter.t_last)
            if keys is None:
                keep.append(entry)
                continue
            self._start_on_shards(job, keys, now)
        for entry in keep:
            heapq.heappush(self.opp_queue, entry)

    def _start_on_shards(self, job: SimJob, keys: list[GpuKey], now: float) -> None:
        sh = self.shares
        sh.touch(keys)
        for k in keys:
            sh.gpus[k].opp.append(job)
            sh.changed.add(k[0])
        sh.placed[job] = keys
        self.on_shards.add(job)
        self.shard_starts += 1
        job.running = True
        job.killed = False
        job.key_ver += 1  # its entry in the engine's queue goes stale
        self.keys.pending_ver += 1
        if self.share.whole_gpus:
            self.state.n_pending -= 1  # the engine counted it pending
            self.scheduler.bf_changed = True
        job.start = now
        if job.first_start is None:
            job.first_start = now
        # _respeed sets rate and speed and pushes the stint's end (its time limit even
        # when paused at once: speed -1 is "not computed yet", never skipped); a requeued
        # job goes on from its checkpoint
        sh.track[job] = Track(now, job.progress, 0.0, now, speed=-1.0, p_start=job.progress)

    def _requeue_paused(self, job: SimJob, now: float) -> None:
        """What the service does to a job paused past the bound (`policy.opportunistic`):
        `scontrol requeue`. It leaves its shard, keeps the work up to its last checkpoint
        and queues again (for shards, and whole GPUs too with `whole_gpus`), its time
        limit starting afresh."""
        self.meter.advance(now)
        done = min(job.duration, self._progress(job, now))
        ck = self.cl.checkpoint_interval_s
        sh = self.shares
        by = self.placement.paused_by.setdefault(job.id, set())
        by.update(g.id for k in sh.placed.get(job, ()) if (g := sh.gpus[k].guaranteed))
        self._leave(job, now)
        self.on_shards.discard(job)
        sh.paused_since.pop(job.id, None)
        job.progress = (done // ck) * ck if ck > 0 else done
        job.running = False
        job.run_ver += 1
        job.key_ver += 1
        self.opp_requeues += 1
        heapq.heappush(self.opp_queue, (job.submit, job.id, job))
        if self.share.whole_gpus:
            self.state.n_pending += 1
            self.keys.pending_ver += 1
            self.scheduler.bf_changed = True
            self.keys.rekey(job, now)  # the engine's queue
        sh.touch(())

    # ---- leaving, speeds ---------------------------------------------------------------
    def _leave(self, job: SimJob, now: float) -> None:
        """Take a stopping job off its GPUs; its history goes to the store."""
        sh = self.shares
        sh.touch(sh.placed.get(job, ()))
        for k in sh.placed.pop(job, []):
            g = sh.gpus[k]
            if g.guaranteed is job:
                g.guaranteed = None
            elif job in g.opp:
                g.opp.remove(job)
            sh.changed.add(k[0])
        sh.paused.discard(job)
        sh.paused_since.pop(job.id, None)
        for held in sh.node_paused.values():
            held.discard(job)
        tr = sh.track.pop(job, None)
        self.agents.forget(job)
        self.job_speed.pop(job, None)
        if tr is not None and now > tr.from_t:
            # wall seconds run (at the engine's own rate) against work done: the stretch
            # interference and pauses added to this job's run
            st = self.stretch.setdefault(job.id, [0.0, 0.0])
            base = 1.0 if job in self.on_shards else 1.0 / job.slowdown
            st[0] += (now - tr.from_t) * base
            st[1] += work_at(tr, now) - tr.p_start
        if tr is not None and (self.share.agent.eaco is not None or self.share.learnt_placement):
            self._record(job, tr)
        self._respeed(now)

    def _record(self, job: SimJob, tr: Track) -> None:
        """What the agents measured of `job`'s run, into the co-location history."""
        self.placement.util_cache.clear()
        s = tr.sums
        self.coloc_history.record(
            [
                Observation(
                    kind_keys(self.trace[job.id]),
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

    def _respeed(self, now: float) -> None:
        """Recompute the running jobs' speeds, rates and finish times and the GPUs' power:
        all a function of the GPUs' occupants and the pauses, so only when those changed,
        and only for the GPUs that changed (`respeed_gpus`), the jobs on them and those
        jobs' other GPUs (a job runs at its slowest GPU's speed)."""
        sh = self.shares
        if not sh.stale:
            return
        sh.stale = False
        per_gpu = self.agents.speeds()
        gpus, placed, paused = sh.gpus, sh.placed, sh.paused
        jobs: set[SimJob] = set()
        for k in sh.respeed_gpus:
            g = gpus[k]
            if g.guaranteed is not None:
                jobs.add(g.guaranteed)
            jobs.update(g.opp)
        job_speed = self.job_speed
        affected = set(sh.respeed_gpus)
        sh.respeed_gpus.clear()
        for j in jobs:
            keys = placed.get(j, ())
            affected.update(keys)
            sp = 1.0
            for k in keys:
                d = per_gpu.get(k)
                if d is not None and j in d and d[j] < sp:
                    sp = d[j]
            job_speed[j] = 0.0 if j in paused else sp
        on_affected = self._repower(sorted(affected), per_gpu)
        power, gpu_watts = self.share.power, self.meter.gpu_watts
        for job in sorted(on_affected, key=_job_id):
            tr = sh.track.get(job)
            if tr is None:
                continue
            s = job_speed.get(job, 0.0)
            keys = placed.get(job, [])
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
            self._push_end(job, tr, now)

    def _repower(self, affected: list[GpuKey], per_gpu: Speeds) -> set[SimJob]:
        """The power and use of the `affected` GPUs (sorted: sums in the same order every
        run), and the GPUs' totals; the jobs on those GPUs."""
        gpus, m, power = self.shares.gpus, self.meter, self.share.power
        job_speed = self.job_speed
        on_affected: set[SimJob] = set()
        for k in affected:
            g = gpus[k]
            if g.guaranteed is not None or g.opp:
                m.held_gpus.add(k)
                if g.guaranteed is not None:
                    on_affected.add(g.guaranteed)
                on_affected.update(g.opp)
            else:
                m.held_gpus.discard(k)
            d = per_gpu.get(k)
            if d is None:
                m.gpu_watts.pop(k, None)
                m.gpu_busy.pop(k, None)
                continue
            b = sum(self.profile[j.id].util * job_speed[j] for j in d)
            m.gpu_busy[k] = min(1.0, b)
            m.gpu_watts[k] = power.watts(b)
        watts = sum(m.gpu_watts.values())
        used = len(m.gpu_watts)
        m.watts = watts + (len(gpus) - used) * power.idle_w
        m.holding = len(m.held_gpus)
        m.held_watts = watts + (m.holding - used) * power.idle_w
        m.busy = sum(m.gpu_busy.values())
        return on_affected

    def _push_end(self, job: SimJob, tr: Track, now: float) -> None:
        """File the end of `job`'s stint at its rate now (`tr`), or at its time limit."""
        end = INF
        if tr.rate > 0:
            end = max(now, tr.from_t) + max(0.0, job.duration - tr.p0) / tr.rate
        # Slurm ends a stint at its time limit however slow (or paused) it ran
        kill = job.start + job.limit if self.slurm and job.limit is not None else INF
        job.killed = kill < end
        end = min(end, kill)
        if end < INF:
            self.state.push_event(max(now, end), FINISH, job, job.run_ver)
