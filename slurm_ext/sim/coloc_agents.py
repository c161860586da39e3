"""The simulated node agents of `SharingSimulator`: each GPU's jobs' speeds and each
node's agent sampling them and running `policy.colocation.decide()` - the very function
the real agent runs - on what it would read. A mixin so that sim/coloc.py keeps the
engine hooks and placement, this module the agents."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from slurm_ext.policy import colocation as co
from slurm_ext.sim.coloc_model import AGENT_SAMPLE_S, MAX_ROUNDS, GpuKey, kind_keys
from slurm_ext.sim.engine import WAKE
from slurm_ext.sim.sharing import speeds
from slurm_ext.sim.simjob import SimJob

if TYPE_CHECKING:
    from slurm_ext.sim.coloc import SharingSimulator


class SimulatedAgents:
    """Mixin of `SharingSimulator`."""

    def _touch(self: SharingSimulator, keys: Sequence[GpuKey]) -> None:
        """These GPUs' occupants or pauses changed: their speeds and power are stale."""
        self.stale = True
        self.dirty_gpus.update(keys)
        self.respeed_gpus.update(keys)

    def _speeds(self: SharingSimulator) -> dict[GpuKey, dict[SimJob, float]]:
        """Each active GPU's jobs' speeds (read-only: kept and updated in place)."""
        out = self.gpu_speed
        for k in self.dirty_gpus:
            g = self.gpus[k]
            active = ([g.guaranteed] if g.guaranteed else []) + [
                o for o in g.opp if o not in self.paused
            ]
            if active:
                sp = speeds([self.profile[j.id] for j in active], self.share.interference)
                out[k] = dict(zip(active, sp, strict=True))
            else:
                out.pop(k, None)
        self.dirty_gpus.clear()
        return out

    def _job_speeds(
        self: SharingSimulator, per_gpu: dict[GpuKey, dict[SimJob, float]]
    ) -> dict[SimJob, float]:
        out: dict[SimJob, float] = {}
        for d in per_gpu.values():
            for j, s in d.items():
                out[j] = min(out.get(j, 1.0), s)
        for j in self.paused:
            out[j] = 0.0
        return out

    def _agents(self: SharingSimulator) -> None:
        """Sample every changed node's agent at this instant, again while a sample
        changes something (a pause or resume, or a job's speed, which nodes spanning the
        same job see too), at most MAX_ROUNDS times: the real agents act within a sample
        or two of each other. Each sample also counts as AGENT_SAMPLE_S of what a
        co-located job measured, so history learns from pairs the agent separates at once."""
        for _ in range(MAX_ROUNDS):
            if not self.changed:
                return
            per_gpu = self._speeds()
            job_speed = self._job_speeds(per_gpu)
            for j, sp in job_speed.items():
                if self.seen_speed.get(j) != sp:
                    self.seen_speed[j] = sp
                    self.changed.update(k[0] for k in self.placed.get(j, ()))
            sampled: set[SimJob] = set()
            nodes, self.changed = sorted(self.changed), set()
            for node in nodes:
                self._sample(node, per_gpu, job_speed, sampled)
        self.changed.clear()

    def _sample(
        self: SharingSimulator,
        node: str,
        per_gpu: dict[GpuKey, dict[SimJob, float]],
        job_speed: dict[SimJob, float],
        sampled: set[SimJob],
    ) -> None:
        power = self.share.power
        state = self.agents[node]
        views = []
        live: set[int] = set()
        by_id: dict[int, SimJob] = {}  # the opportunistic jobs on this node
        for k in self._node_gpus(node):
            g = self.gpus[k]
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
                tr = self.track.get(j)
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
                    p = self.coloc_history.predict(keys, self.share.min_runs)
                    if p is not None:
                        state.predictions[j.id] = p
            mem = sum(self.profile[j.id].mem for j in jobs)
            views.append(co.GpuView(f"{k[0]}/{k[1]}", tuple(on), mem, watts))
        co.forget(state, live)
        held = self.node_paused[node]
        state.paused = {j.id for j in held if j.id in live}
        refused_before = set(state.refused)
        sources_before = set(state.verdict_source)
        for a in co.decide(views, state, self.share.agent):
            job = by_id.get(a.job_id)
            if job is None:
                continue
            self.changed.update(k[0] for k in self.placed.get(job, ()))
            self._touch(self.placed.get(job, ()))
            if a.kind == "pause":
                held.add(job)
                self.paused.add(job)
                self.pauses[job.id] = self.pauses.get(job.id, 0) + 1
                if self.share.max_pause_s > 0 and job.id not in self.paused_since:
                    self.paused_since[job.id] = self.t_last  # wakes at its bound
                    self._push_event(self.t_last + self.share.max_pause_s, WAKE, job, job.key_ver)
            else:
                held.discard(job)
                if not any(job in h for h in self.node_paused.values()):
                    self.paused.discard(job)
                    self.paused_since.pop(job.id, None)
                self.resumes += 1
        self.refusals += len(set(state.refused) - refused_before)
        for job_id in set(state.verdict_source) - sources_before:
            src = state.verdict_source[job_id]
            self.verdicts[src] = self.verdicts.get(src, 0) + 1
