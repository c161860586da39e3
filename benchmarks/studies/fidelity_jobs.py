"""Job by job: where a live replay and its simulation part (used by fidelity.py).

Live, from the replay's records.json (Slurm's own records: submit and runs, epoch
seconds); simulated, from the simulator's jobs. Both in trace seconds from each job's
trace submit time, so a job's wait, its requeues and its end can be set side by side:
which jobs were requeued in one run and not the other, and which jobs' JCTs moved most.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from slurm_ext.sim.simjob import SimJob
from slurm_ext.sim.traces import TraceJob


def live_jobs(records: Path, trace: Sequence[TraceJob], speedup: float) -> dict[int, dict]:
    """Per trace job id: first start, end (trace s after its submit) and requeues.
    Records without a submit time (older replays) are placed by the replay's start,
    estimated as the earliest first start less that job's scheduled submit."""
    recs = json.loads(records.read_text())
    by_id = {t.job_id: t for t in trace}
    ran = {int(k): r for k, r in recs.items() if r["runs"]}
    if any(r.get("submit") is None for r in ran.values()):
        epoch = min(r["runs"][0][0] - by_id[k].submit_time / speedup for k, r in ran.items())
        for k, r in ran.items():
            r["submit"] = epoch + by_id[k].submit_time / speedup
    return {
        k: {
            "start": (r["runs"][0][0] - r["submit"]) * speedup,
            "end": (r["runs"][-1][1] - r["submit"]) * speedup,
            "requeues": r["requeues"],
            "held": sum(e - s for s, e in r["runs"]) * speedup,
            "state": r["state"],
        }
        for k, r in ran.items()
    }


def launch_extras(
    records: Sequence[Path], trace: Sequence[TraceJob], speedup: float
) -> list[float]:
    """How much longer than its work each job held its GPUs live (wall s): Slurm's
    launch, the interpreter's start and sacct's whole seconds (fidelity_ctld has it to
    the millisecond where the run kept slurmctld's log). Jobs that ran once and
    completed, over all the given replays' records."""
    work = {t.job_id: t.duration_s / speedup for t in trace}
    return [
        sum(e - s for s, e in r["runs"]) - work[int(k)]
        for path in records
        if path.exists()
        for k, r in json.loads(path.read_text()).items()
        if r["state"] == "COMPLETED" and r["requeues"] == 0 and r["runs"]
    ]


def sim_jobs(jobs: Sequence[SimJob]) -> dict[int, dict]:
    return {
        j.id: {
            "start": (j.first_start or 0.0) - j.submit,
            "end": (j.finish or 0.0) - j.submit,
            "requeues": j.preemptions,
            "held": j.executed,
            "state": "TIMEOUT" if j.timed_out else "COMPLETED",
        }
        for j in jobs
    }


def compare(live: dict[int, dict], sim: dict[int, dict], top: int = 8) -> list[str]:
    """Lines: requeued jobs live vs simulated, and the jobs whose JCT differs most."""
    both = sorted(set(live) & set(sim))
    req_live = {k for k in both if live[k]["requeues"]}
    req_sim = {k for k in both if sim[k]["requeues"]}
    n = len(both) or 1
    lines = [
        f"jobs {len(both)}; requeued live {len(req_live)} ({sum(live[k]['requeues'] for k in both)}"
        f" requeues), simulated {len(req_sim)} ({sum(sim[k]['requeues'] for k in both)});"
        f" in both {len(req_live & req_sim)}",
        f"avg first-start wait live {sum(live[k]['start'] for k in both) / n:.0f} s,"
        f" simulated {sum(sim[k]['start'] for k in both) / n:.0f} s;"
        f" avg held live {sum(live[k]['held'] for k in both) / n:.0f} s,"
        f" simulated {sum(sim[k]['held'] for k in both) / n:.0f} s",
    ]
    worst = sorted(both, key=lambda k: -abs(live[k]["end"] - sim[k]["end"]))[:top]
    for k in worst:
        a, b = live[k], sim[k]
        lines.append(
            f"  job {k}: JCT live {a['end']:.0f} sim {b['end']:.0f}; first start live"
            f" {a['start']:.0f} sim {b['start']:.0f}; requeues live {a['requeues']}"
            f" sim {b['requeues']}; {a['state']}/{b['state']}"
        )
    return lines


def per_job(
    live: Path, out: Path, trace: Sequence[TraceJob], speedup: float, sim_run: list
) -> None:
    """Where live and simulated runs part, job by job (printed, and kept as per_job.txt)."""
    records = live / "records.json"
    if not records.exists():
        return
    lines = compare(live_jobs(records, trace, speedup), sim_jobs(sim_run))
    out.mkdir(parents=True, exist_ok=True)
    (out / "per_job.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(f"  {line}" for line in lines), flush=True)
