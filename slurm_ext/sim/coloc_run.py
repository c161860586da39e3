"""Co-location against Slurm alone on the same trace, in one call: both runs and ratios.

"Slurm alone" is the unchanged engine with every job on whole GPUs, in the Slurm-alone
setting of `--compare` (FIFO, `--scheduler slurm`, no preemption: `run.slurm_alone`);
"shared" is `SharingSimulator` with the policy and cluster given (for sharing's effect
alone, give the same: `--policy fifo --no-preemptive`). Both runs read the same trace
with the same time limits (`run.with_limits`, filled where the trace has none), and under
the Slurm scheduler a stint that outlives its limit (sharing slows it) is killed, as
Slurm would.

Both are charged by the same power model over their own run (first submit to last
completion, idle GPUs at idle power): alone, a GPU with a job draws idle + dynamic x the
job's utilisation, so its energy is a sum over jobs; shared, the simulator integrates
each GPU's power as it changes. `held_kwh_...` counts only GPUs that hold a job (idle
ones as if powered down: EaCO's accounting), the figure where packing shows; with idle
GPUs at idle power the energy of a trace whose jobs all finish moves only with the
makespan. Utilisation: `gpu_utilization` is the GPUs' busy fraction (what
nvidia-smi's utilization.gpu reads, capped at 1 per GPU) over all GPUs and the makespan;
`held_gpu_utilization` the same over the GPU-seconds that hold a job (EaCO's "GPUs
holding a job"); `gpus_held_fraction` the share of GPU-seconds allocated at all.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from slurm_ext.policy import PolicyConfig
from slurm_ext.sim.coloc import ShareConfig, SharingSimulator
from slurm_ext.sim.engine import SimConfig, SimJob, Simulator
from slurm_ext.sim.metrics import percentile
from slurm_ext.sim.run import slurm_alone, with_limits
from slurm_ext.sim.sharing import JobProfile, PowerModel
from slurm_ext.sim.traces import TraceJob


def mark_opportunistic(trace: Sequence[TraceJob], fraction: float, seed: int) -> list[TraceJob]:
    """Flag a seeded `fraction` of the jobs opportunistic (jobs flagged already stay so)."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"opportunistic fraction must be within 0..1, got {fraction}")
    rng = random.Random(f"opportunistic-{seed}")
    return [replace(t, opportunistic=t.opportunistic or rng.random() < fraction) for t in trace]


def _jct(jobs: Sequence[SimJob]) -> dict[str, float]:
    jct = sorted(j.finish - j.submit for j in jobs if j.finish is not None)
    n = len(jct)
    return {
        "jobs": n,
        "avg_jct_s": sum(jct) / n if n else 0.0,
        "p99_jct_s": percentile(jct, 99),
    }


@dataclass(frozen=True)
class _Scale:
    """What both runs' figures are measured against."""

    n_gpus: int
    work_gpu_h: float  # the trace's work: GPUs x run time, hours
    start: float  # the first submit
    opp_ids: frozenset[int]  # the opportunistic jobs


def run_pair(
    trace: Sequence[TraceJob],
    policy: PolicyConfig,
    cluster: SimConfig,
    share: ShareConfig,
    profiles: Mapping[int, JobProfile] | None = None,
) -> dict[str, dict[str, float]]:
    """Slurm alone and shared on the same trace; returns both and their ratios.
    `profiles`: job id -> profile for the jobs it names (others drawn from share.mix)."""
    trace = with_limits(trace, slurm_alone(cluster))  # Slurm alone always plans with limits
    scale = _Scale(
        cluster.nodes * cluster.gpus_per_node,
        sum(t.gpus * t.duration_s for t in trace) / 3600.0,
        min((t.submit_time for t in trace), default=0.0),
        frozenset(t.job_id for t in trace if t.opportunistic),
    )
    sim = SharingSimulator(trace, policy, cluster, share, profiles)
    alone = _alone(trace, policy, cluster, sim.profile, share.power, scale)
    shared = _shared(sim, scale)
    ratios = {
        k: (shared[k] / alone[k] if alone[k] else 0.0)
        for k in (
            "kwh_per_gpu_hour_of_work",
            "held_kwh_per_gpu_hour_of_work",
            "gpu_utilization",
            "held_gpu_utilization",
            "gpus_held_fraction",
            "makespan_s",
            "guaranteed_avg_jct_s",
            "guaranteed_p99_jct_s",
            "opportunistic_avg_jct_s",
            "opportunistic_p99_jct_s",
        )
    }
    return {"slurm_alone": alone, "shared": shared, "shared_vs_alone": ratios}


def _alone(
    trace: Sequence[TraceJob],
    policy: PolicyConfig,
    cluster: SimConfig,
    prof: Mapping[int, JobProfile],
    power: PowerModel,
    scale: _Scale,
) -> dict[str, float]:
    """Slurm alone's run and figures: its energy summed over its jobs."""
    t0 = time.perf_counter()
    alone_sim = Simulator(trace, replace(policy, policy="fifo"), slurm_alone(cluster))
    alone_jobs = alone_sim.run()
    n_gpus, work_gpu_h, opp_ids = scale.n_gpus, scale.work_gpu_h, scale.opp_ids
    span = max(j.finish for j in alone_jobs) - scale.start  # type: ignore[type-var]
    run_s = {j.id: j.executed for j in alone_jobs}
    busy_gpu_s = sum(prof[t.job_id].util * t.gpus * run_s[t.job_id] for t in trace)
    dynamic = (power.busy_w - power.idle_w) * busy_gpu_s
    energy = power.idle_w * n_gpus * span + dynamic
    held_gpu_s = sum(t.gpus * run_s[t.job_id] for t in trace)
    held = power.idle_w * held_gpu_s + dynamic
    return {
        "energy_kwh": energy / 3.6e6,
        "kwh_per_gpu_hour_of_work": energy / 3.6e6 / work_gpu_h,
        "held_kwh_per_gpu_hour_of_work": held / 3.6e6 / work_gpu_h,
        "gpu_utilization": busy_gpu_s / (n_gpus * span),
        "held_gpu_utilization": busy_gpu_s / held_gpu_s if held_gpu_s else 0.0,
        "gpus_held_fraction": held_gpu_s / (n_gpus * span),
        "makespan_s": span,
        **{
            f"guaranteed_{k}": v
            for k, v in _jct([j for j in alone_jobs if j.id not in opp_ids]).items()
        },
        **{
            f"opportunistic_{k}": v
            for k, v in _jct([j for j in alone_jobs if j.id in opp_ids]).items()
        },
        "timeouts": alone_sim.timeouts,
        "opportunistic_timeouts": sum(j.timed_out for j in alone_jobs if j.id in opp_ids),
        "runtime_s": time.perf_counter() - t0,
    }


def _shared(sim: SharingSimulator, scale: _Scale) -> dict[str, float]:
    """The shared run and its figures: the energy its meter integrated."""
    t1 = time.perf_counter()
    sim.run()
    if any(j.finish is None for j in sim.opp_jobs):
        raise RuntimeError("simulation ended with opportunistic jobs unfinished")
    n_gpus, work_gpu_h, opp_ids = scale.n_gpus, scale.work_gpu_h, scale.opp_ids
    m, agents = sim.meter, sim.agents
    span_s = sim.span[1] - scale.start
    stretch = sorted(w / d for j, (w, d) in sim.stretch.items() if j not in opp_ids and d > 0)
    pauses = [agents.pauses.get(j.id, 0) for j in sim.opp_jobs]
    return {
        "energy_kwh": m.energy_j / 3.6e6,
        "kwh_per_gpu_hour_of_work": m.energy_j / 3.6e6 / work_gpu_h,
        "held_kwh_per_gpu_hour_of_work": m.held_energy_j / 3.6e6 / work_gpu_h,
        "gpu_utilization": m.busy_gpu_s / (n_gpus * span_s),
        "held_gpu_utilization": m.busy_gpu_s / m.held_gpu_s if m.held_gpu_s else 0.0,
        "gpus_held_fraction": m.held_gpu_s / (n_gpus * span_s),
        "makespan_s": span_s,
        **{
            f"guaranteed_{k}": v for k, v in _jct([j for j in sim.jobs if j not in sim.opp]).items()
        },
        **{f"opportunistic_{k}": v for k, v in _jct(sim.opp_jobs).items()},
        "timeouts": sim.timeouts,
        "opportunistic_timeouts": sum(j.timed_out for j in sim.opp_jobs),
        "guaranteed_stretch_p50": percentile(stretch, 50),
        "guaranteed_stretch_p99": percentile(stretch, 99),
        "guaranteed_stretch_max": stretch[-1] if stretch else 1.0,
        "guaranteed_over_1_10": sum(s > 1.10 for s in stretch),
        "opportunistic_started_on_shards": sim.shard_starts,
        "pauses_per_opportunistic_job": sum(pauses) / len(pauses) if pauses else 0.0,
        "pauses_max": max(pauses, default=0),
        "resumes": agents.resumes,
        "opportunistic_requeues": sim.opp_requeues,
        "eaco_refusals": agents.refusals,
        "eaco_verdicts_learnt": agents.verdicts.get("learnt", 0),
        "eaco_verdicts_configured": agents.verdicts.get("configured", 0),
        "guaranteed_starts_beside_running_opportunistic": sim.unjudged,
        "runtime_s": time.perf_counter() - t1,
    }
