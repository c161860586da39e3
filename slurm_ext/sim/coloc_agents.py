"""The simulated node agents of `SharingSimulator` (sim/coloc.py): each GPU's jobs'
speeds and each node's agent sampling them and running `policy.colocation.decide()` -
the very function the real agent runs - on what it would read. A part the simulator
calls, over the GPUs it shares (`GpuShares`)."""

from __future__ import annotations

from collections.abc import Mapping

from slurm_ext.policy import colocation as co
from slurm_ext.sim.coloc_gpus import GpuShares
from slurm_ext.sim.coloc_history import ColocHistory
from slurm_ext.sim.coloc_model import AGENT_SAMPLE_S, MAX_ROUNDS, GpuKey, ShareConfig, kind_keys
from slurm_ext.sim.sharing import JobProfile, speeds
from slurm_ext.sim.simjob import SimJob
from slurm_ext.sim.state import WAKE, SimState
from slurm_ext.sim.traces import TraceJob

Speeds = dict[GpuKey, dict[SimJob, float]]  # each active GPU's jobs' speeds


class SimulatedAgents:
    """Every node's agent (`states`), the speeds they read, and what they did."""

    def __init__(
        self,
        shares: GpuShares,
        share: ShareConfig,
        profile: Mapping[int, JobProfile],
        trace: Mapping[int, TraceJob],
        opp: set[SimJob],
        history: ColocHistory,
        state: SimState,
    ) -> None:
        self.shares, self.share, self.profile, self.trace = shares, share, profile, trace
        self.opp, self.history, self.st = opp, history, state
        self.states = {n: co.CoState() for n in shares.node_paused}
        # each active GPU's jobs' speeds, recomputed for the GPUs in `dirty_gpus` only
        self.gpu_speed: Speeds = {}
        self.seen_speed: dict[SimJob, float] = {}  # each job's speed at the last sample
        self.pauses: dict[int, int] = {}  # job id -> pauses
        self.resumes = 0
        self.refusals = 0
        self.verdicts: dict[str, int] = {}  # EaCO verdicts by input source: learnt/configured

    def forget(self, job: SimJob) -> None:
        """`job` left its GPUs."""
        self.seen_speed.pop(job, None)

    def speeds(self) -> Speeds:
        """Each active GPU's jobs' speeds (read-only: kept and updated in place)."""
        sh = self.shares
        out = self.gpu_speed
        for k in sh.dirty_gpus:
            g = sh.gpus[k]
            active = ([g.guaranteed] if g.guaranteed else []) + [
                o for o in g.opp if o not in sh.paused
            ]
            if active:
                sp = speeds([self.profile[j.id] for j in active], self.share.interference)
                out[k] = dict(zip(active, sp, strict=True))
            else:
                out.pop(k, None)
        sh.dirty_gpus.clear()
        return out

    def job_speeds(self, per_gpu: Speeds) -> dict[SimJob, float]:
        """Each job's speed: its slowest GPU's, 0 while paused."""
        out: dict[SimJob, float] = {}
        for d in per_gpu.values():
            for j, s in d.items():
                out[j] = min(out.get(j, 1.0), s)
        for j in self.shares.paused:
            out[j] = 0.0
        return out

    def look(self, now: float) -> None:
        """Sample every changed node's agent at this instant, again while a sample
        changes something (a pause or resume, or a job's speed, which nodes spanning the
        same job see too), at most MAX_ROUNDS times: the real agents act within a sample
        or two of each other. Each sample also counts as AGENT_SAMPLE_S of what a
        co-located job measured, so history learns from pairs the agent separates at once."""
        sh = self.shares
        for _ in range(MAX_ROUNDS):
            if not sh.changed:
                return
            per_gpu = self.speeds()
            job_speed = self.job_speeds(per_gpu)
            for j, sp in job_speed.items():
                if self.seen_speed.get(j) != sp:
                    self.seen_speed[j] = sp
                    sh.changed.update(k[0] for k in sh.placed.get(j, ()))
            sampled: set[SimJob] = set()
            nodes, sh.changed = sorted(sh.changed), set()
            for node in nodes:
                self._sample(node, per_gpu, job_speed, sampled, now)
        sh.changed.clear()

    def _sample(
        self,
        node: str,
        per_gpu: Speeds,
        job_speed: dict[SimJob, float],
        sampled: set[SimJob],
        now: float,
    ) -> None:
        """One sample of `node`'s agent at `now`, and what its verdicts do."""
        power = self.share.power
        state = self.states[node]
        sh = self.shares
        views = []
        live: set[int] = set()
        by_id: dict[int, SimJob] = {}  # the opportunistic jobs on this node
        for k in sh.node_gpus(node):
            g = sh.gpus[k]
            jobs = ([g.guaranteed] if g.guaranteed else []) + g.opp
            if not jobs:
                continue
            busy = sum(self.profile[j.id].util * job_speed.get(j, 0.0) for j in jobs)
            watts = power.watts(busy)
            on = []
            for j in jobs:
                live.add(j.id)
                if j in self.opp:
                    by_id[j.id] = j
                util = self.profile[j.id].util * job_speed.get(j, 0.0)
                klass = co.OPPORTUNISTIC if j in self.opp else co.GUARANTEED
                on.append(co.JobOnGpu(j.id, klass, util))
                tr = sh.track.get(j)
                if tr is not None and j not in sampled and len(per_gpu.get(k, ())) > 1:
                    if j in per_gpu[k]:  # active beside another active job: a shared sample
                        sampled.add(j)
                        d = AGENT_SAMPLE_S
                        tr.sums[3] += d
                        tr.sums[4] += util * d
                        tr.sums[5] += watts * d
                        tr.sums[6] += job_speed.get(j, 0.0) * d
                if self.share.agent.eaco is not None and j.id not in state.predictions:
                    keys = kind_keys(self.trace[j.id])
                    p = self.history.predict(keys, self.share.min_runs)
                    if p is not None:
                        state.predictions[j.id] = p
            mem = sum(self.profile[j.id].mem for j in jobs)
            views.append(co.GpuView(f"{k[0]}/{k[1]}", tuple(on), mem, watts))
        co.forget(state, live)
        held = sh.node_paused[node]
        state.paused = {j.id for j in held if j.id in live}
        refused_before = set(state.refused)
        sources_before = set(state.verdict_source)
        for a in co.decide(views, state, self.share.agent):
            job = by_id.get(a.job_id)
            if job is None:
                continue
            sh.changed.update(k[0] for k in sh.placed.get(job, ()))
            sh.touch(sh.placed.get(job, ()))
            if a.kind == "pause":
                held.add(job)
                sh.paused.add(job)
                self.pauses[job.id] = self.pauses.get(job.id, 0) + 1
                if self.share.max_pause_s > 0 and job.id not in sh.paused_since:
                    sh.paused_since[job.id] = now  # wakes at its bound
                    self.st.push_event(now + self.share.max_pause_s, WAKE, job, job.key_ver)
            else:
                held.discard(job)
                if not any(job in h for h in sh.node_paused.values()):
                    sh.paused.discard(job)
                    sh.paused_since.pop(job.id, None)
                self.resumes += 1
        self.refusals += len(set(state.refused) - refused_before)
        for job_id in set(state.verdict_source) - sources_before:
            src = state.verdict_source[job_id]
            self.verdicts[src] = self.verdicts.get(src, 0) + 1
