"""Placement in a replay: the service's placement hints on, and where Slurm put each job.

`enable_hints` turns on the service's `placement` key (it names nodes, ReqNodeList, for
a waiting job that can start now) in the config the replay wrote. `read_allocations`
asks sacct which nodes each run of each job held, so the fragmentation metric
(`core/fragmentation.py`) can be computed from Slurm's own records after the run.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

from slurm_ext.core import tomlio
from slurm_ext.core.fragmentation import JobRuns, even_split, summarize
from slurm_ext.policy import MODES
from slurm_ext.replay.plan import ReplayJob
from slurm_ext.replay.records import RecordsError, _epoch, run_sacct
from slurm_ext.replay.target import _GRES_GPU, Target, TargetError, _run
from slurm_ext.slurm.hostlist import expand_hostlist

SACCT_FORMAT = "JobIDRaw,State,Submit,Start,End,AllocTRES,NodeList"
# the figures `record` adds to a replay's row (text output; --json has them all)
PLACEMENT_KEYS = ("placement_hints", "wait4_s", "wait8_s", "frag_share", "idle_share")


def enable_hints(config: Path, mode: str) -> Path:
    """Set `placement = true` and `placement_mode = mode` in a replay's service.toml."""
    if mode not in MODES:
        raise ValueError(f"placement hints mode must be one of {', '.join(MODES)}, got {mode!r}")
    data = tomlio.loads(config.read_text())
    data["placement"] = True
    data["placement_mode"] = mode
    config.write_text(tomlio.dumps(data))
    return config


def parse_allocations(text: str, gpus: Mapping[int, int], now: float) -> dict[int, JobRuns]:
    """`sacct -D -X -n -P -o SACCT_FORMAT` rows -> per job, its runs with their nodes.

    A run's GPUs per node: the even split of its GPUs over its nodes (exact for the
    replay's requests: one node, or whole nodes of G GPUs each).
    """
    out: dict[int, JobRuns] = {}
    for line in text.splitlines():
        f = line.split("|")
        if len(f) < 7 or not f[0].isdigit():
            continue
        job_id = int(f[0])
        submit, start, end = _epoch(f[2]), _epoch(f[3]), _epoch(f[4])
        job = out.get(job_id)
        if job is None:
            job = out[job_id] = JobRuns(job_id, gpus.get(job_id, 0), submit or 0.0)
        elif submit is not None:
            job.submit = min(job.submit, submit)
        nodes = expand_hostlist(f[6]) if f[6] not in ("", "None assigned") else []
        if start is not None and nodes:
            alloc = tuple(even_split(job.gpus, nodes))
            job.runs.append((start, end if end is not None else now, alloc))
    for job in out.values():
        job.runs.sort()
    return out


def read_allocations(
    env: Mapping[str, str], gpus: Mapping[int, int], since: float
) -> dict[int, JobRuns]:
    """Slurm's record of the nodes each run held (slurmdbd must be on)."""
    if not gpus:
        return {}
    out = run_sacct(env, sorted(gpus), since, SACCT_FORMAT)
    return parse_allocations(out, gpus, datetime.now().timestamp())


def save_allocations(path: Path, jobs: Mapping[int, JobRuns], trace_ids: Mapping[int, int]) -> None:
    """allocations.json: per trace job, Slurm's id, GPUs, submit and runs (start, end,
    [[node, GPUs], ...]) in epoch seconds."""
    out = {
        str(trace_ids[sid]): {
            "slurm_id": sid,
            "gpus": j.gpus,
            "submit": j.submit,
            "runs": [[s, e, [list(a) for a in alloc]] for s, e, alloc in j.runs],
        }
        for sid, j in jobs.items()
        if sid in trace_ids
    }
    path.write_text(json.dumps(out, indent=1))


def load_allocations(path: Path) -> dict[int, JobRuns]:
    """allocations.json back into JobRuns, keyed by trace job id."""
    data = json.loads(path.read_text())
    return {
        int(k): JobRuns(
            int(k),
            int(v["gpus"]),
            float(v["submit"]),
            [(float(s), float(e), tuple((str(n), int(g)) for n, g in a)) for s, e, a in v["runs"]],
        )
        for k, v in data.items()
    }


def node_gpus(tgt: Target) -> dict[str, int]:
    """Every node of the target's partition with its GPUs (sinfo)."""
    out = _run(tgt.env, "sinfo", "-h", "-N", "-p", tgt.partition, "-o", "%N|%G")
    nodes: dict[str, int] = {}
    for line in out.splitlines():
        name, _, gres = line.partition("|")
        m = _GRES_GPU.search(gres)
        if name.strip():
            nodes[name.strip()] = int(m.group(1)) if m else 0
    return nodes


def record(
    workdir: Path, tgt: Target, submitted: Mapping[int, ReplayJob], epoch: float, speedup: float
) -> dict[str, float]:
    """Save allocations.json and return the placement figures (trace seconds), or {}
    without accounting or when sacct fails (said on stderr; the replay's row stands)."""
    if not tgt.accounting:
        return {}
    gpus = {sid: job.trace.gpus for sid, job in submitted.items()}
    try:
        jobs = read_allocations(tgt.env, gpus, epoch)
        nodes = node_gpus(tgt)
    except (RecordsError, TargetError) as exc:
        print(f"placement figures skipped: {exc}", file=sys.stderr, flush=True)
        return {}
    save_allocations(
        workdir / "allocations.json", jobs, {sid: j.trace.job_id for sid, j in submitted.items()}
    )
    return summarize(list(jobs.values()), nodes, max(nodes.values(), default=0), speedup)
