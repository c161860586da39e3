"""Why is my job waiting? The queue as the service ranks it, one job's reasons, free GPUs.

Plain functions shared by the local CLI (`slurm-ext queue/explain`, which read the store
and Slurm on the controller), the listener's read-only view (slurm_ext/userview_http.py,
which reads the store only) and `--server URL` (which fetches that view): the row and
explanation dictionaries have the same keys on every path, so one renderer prints them.
A value a path cannot know (the listener never asks Slurm for its current priority) is
None and printed as "-".
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from slurm_ext.model import Node
from slurm_ext.store import DecisionRecord, JobRecord

PRIVACY = ("full", "anonymous", "off")  # ServiceConfig.user_view
MAX_RESPONSE_BYTES = 64 << 20  # what `fetch_json` reads at most from a --server


class ViewError(RuntimeError):
    """The --server view cannot be read (unreachable, an error status, not JSON)."""


class ViewNotFound(ViewError):
    """The server answered 404 (an unknown job, or the view is off)."""


def wait_s(rec: JobRecord | None, now: float) -> float | None:
    """Seconds a waiting job has waited since it last became pending (None if running)."""
    if rec is None or rec.state != "PENDING":
        return None
    since = rec.waiting_since if rec.waiting_since is not None else rec.submit_time
    return max(0.0, now - since)


def queue_row(d: DecisionRecord | None, rec: JobRecord | None, now: float, **slurm: object) -> dict:
    """One queue line. `slurm` overrides what the store says with what Slurm says now
    (job_id, user, state, gpus, slurm_priority, reason) on the controller's local path."""
    row = {
        "job_id": d.job_id if d else rec.job_id if rec else None,
        "user": rec.user if rec else "",
        "state": rec.state if rec else "",
        "gpus": rec.gpus if rec else 0,
        "rank": d.rank if d else None,
        "queue": d.queue if d else None,
        "gittins": d.gittins if d else None,
        "group": (d.group or None) if d else None,
        "group_samples": d.group_samples if d else 0,
        "attained_gpu_s": round(rec.attained_gpu_s(now), 1) if rec else 0.0,
        "wait_s": None if (w := wait_s(rec, now)) is None else round(w),
        "value_set": d.value if d else None,
        "mode": d.mode if d else None,
        "slurm_priority": None,
        "reason": d.slurm_reason if d else "",
        "policy_reason": d.reason if d else "",
        "promoted": bool(d and d.promoted),
    }
    row.update(slurm)
    return row


def sort_rows(rows: list[dict]) -> list[dict]:
    """Ranked jobs in rank order, then unranked ones by job id."""
    return sorted(rows, key=lambda x: (x["rank"] is None, x["rank"] or 0, x["job_id"]))


def explain_info(
    job_id: int,
    d: DecisionRecord | None,
    rec: JobRecord | None,
    pinned: bool,
    now: float,
    **slurm: object,
) -> dict:
    """What `explain` says of one job. `slurm` overrides the store's view with Slurm's
    (slurm_state, slurm_reason, slurm_priority, managed, held) where it was asked."""
    info = {
        "job_id": job_id,
        "user": rec.user if rec else "",
        "gpus": rec.gpus if rec else 0,
        "slurm_state": rec.state if rec else "GONE",
        "slurm_reason": d.slurm_reason if d else "",
        "slurm_priority": None,
        "managed": d is not None,
        "pinned": pinned,
        "held": None,
        "rank": d.rank if d else None,
        "queue": d.queue if d else None,
        "gittins": d.gittins if d else None,
        "group": (d.group or None) if d else None,
        "group_samples": d.group_samples if d else 0,
        "promoted": bool(d and d.promoted),
        "policy_reason": d.reason if d else "not ranked yet (no pass since it appeared)",
        "value_set": d.value if d else None,
        "mode": d.mode if d else None,
        "placement": list(d.placement) if d and d.placement else None,
        "attained_gpu_s": rec.attained_gpu_s(now) if rec else 0.0,
        "wait_s": wait_s(rec, now),
        "last_run_s": rec.last_run_s if rec else 0.0,
        "current_run_s": (now - rec.run_start) if rec and rec.run_start is not None else None,
    }
    info.update(slurm)
    return info


# ---- free GPUs ------------------------------------------------------------------------


@dataclass(frozen=True)
class FreeGpus:
    """Free GPUs, and how many of them sit on nodes too full for the widest waiting job."""

    free: int
    widest_waiting: int  # GPUs of the widest waiting job (0: none waits)
    stranded: int  # free GPUs on nodes that cannot take (their share of) that job

    @property
    def fragmentation(self) -> float:
        return self.stranded / self.free if self.free else 0.0


def free_gpus(nodes: Sequence[Node], waiting_gpus: Iterable[int]) -> FreeGpus:
    """A node cannot take the widest waiting job (W GPUs) when it has fewer than
    min(W, its GPUs) free: a job wider than a node needs whole nodes."""
    usable = [n for n in nodes if n.schedulable and n.gpus > 0]
    widest = max(waiting_gpus, default=0)
    stranded = sum(n.gpus_free for n in usable if widest and 0 < n.gpus_free < min(widest, n.gpus))
    return FreeGpus(sum(n.gpus_free for n in usable), widest, stranded)


def node_rows(nodes: Sequence[Node]) -> list[dict]:
    return [
        {
            "node": n.name,
            "state": n.state,
            "gpus": n.gpus,
            "gpus_used": n.gpus_alloc,
            "gpus_free": n.gpus_free,
            "gpu_type": n.gpu_type,
        }
        for n in sorted(nodes, key=lambda n: n.name)
    ]


# ---- text -----------------------------------------------------------------------------


def fmt_gpu_s(v: float) -> str:
    return f"{v / 3600:.1f}h" if v >= 3600 else f"{v:.0f}s"


def fmt_wait(v: float | None) -> str:
    if v is None:
        return "-"
    if v >= 86400:
        return f"{v / 86400:.1f}d"
    return f"{v / 3600:.1f}h" if v >= 3600 else f"{v:.0f}s"


def _opt(v: object, spec: str = "") -> str:
    return "-" if v is None else format(v, spec)


def format_queue(rows: Sequence[dict], last: dict | None, now: float) -> list[str]:
    """`slurm-ext queue`'s table, one string per line."""
    out = [
        f"{'RANK':>4} {'JOBID':>8} {'USER':<10} {'ST':<4} {'GPUS':>4} {'Q':>2} {'GITTINS':>9} "
        f"{'ATTAINED':>9} {'WAITED':>7} {'SET':>9} {'SLURM_PRIO':>10} REASON"
    ]
    for x in rows:
        out.append(
            f"{_opt(x['rank']):>4} {x['job_id']:>8} {(x['user'] or '-')[:10]:<10} "
            f"{x['state'][:4]:<4} {x['gpus']:>4} {_opt(x['queue']):>2} "
            f"{_opt(x['gittins'], '.3g'):>9} {fmt_gpu_s(x['attained_gpu_s']):>9} "
            f"{fmt_wait(x.get('wait_s')):>7} {_opt(x['value_set']):>9} "
            f"{_opt(x['slurm_priority']):>10} "
            f"{x['reason'] or '-'}{' (promoted)' if x['promoted'] else ''}"
        )
    if last:
        out.append(
            f"last pass {now - last['started_at']:.0f}s ago: {last['ranked']} ranked, "
            f"{last['writes']} writes, {last['errors']} errors"
            + (" (dry run)" if last["dry_run"] else "")
        )
    return out


def format_explain(info: dict) -> list[str]:
    """`slurm-ext explain`'s lines."""
    out = [
        f"job {info['job_id']}: {info['slurm_state']} (Slurm reason: "
        f"{info['slurm_reason'] or '-'}, priority {_opt(info['slurm_priority'])})"
    ]
    if not info["managed"]:
        out.append("  not ranked: outside the service's partitions, or not seen by a pass yet")
    if info["pinned"]:
        out.append("  pinned by an admin: the service never changes it")
    if info["held"]:
        out.append("  held: the service does not touch held jobs")
    out.append(
        f"  rank {_opt(info['rank'])} in queue {_opt(info['queue'])}: {info['policy_reason']}"
    )
    run = (
        f"running for {info['current_run_s']:.0f}s"
        if info["current_run_s"] is not None
        else f"last run stint {info['last_run_s']:.0f}s"
    )
    out.append(f"  attained service {fmt_gpu_s(info['attained_gpu_s'])} GPU-time; {run}")
    if info.get("wait_s") is not None:
        out.append(f"  waiting for {fmt_wait(info['wait_s'])} since it last became pending")
    if info["value_set"] is not None:
        out.append(f"  {(info['mode'] or 'value').replace('_', ' ')} set to {info['value_set']}")
    if info["placement"]:
        out.append(f"  placement hint: ReqNodeList={','.join(info['placement'])}")
    return out


# ---- the --server client --------------------------------------------------------------


def fetch_json(server: str, path: str, timeout_s: float = 10.0) -> dict:
    """GET `path` from the service's view at `server` (http://host:port); its JSON
    document, read up to MAX_RESPONSE_BYTES. Raises ViewError naming what went wrong."""
    url = urllib.parse.urlsplit(server)
    if url.scheme not in ("http", "https") or not url.netloc:
        raise ViewError(f"--server {server!r}: give http://HOST:PORT (the service's listener)")
    full = urllib.parse.urlunsplit((url.scheme, url.netloc, url.path.rstrip("/") + path, "", ""))
    try:
        with urllib.request.urlopen(full, timeout=timeout_s) as r:
            body = r.read(MAX_RESPONSE_BYTES + 1)
    except urllib.error.HTTPError as exc:
        detail = exc.read(1024).decode("utf-8", "replace").strip()
        if exc.code == 404:
            raise ViewNotFound(f"{full}: {detail or 'not found'}") from exc
        raise ViewError(f"{full}: HTTP {exc.code}: {detail}") from exc
    except (OSError, ValueError) as exc:
        raise ViewError(f"{full}: cannot reach the service: {exc}") from exc
    if len(body) > MAX_RESPONSE_BYTES:
        raise ViewError(f"{full}: answer larger than {MAX_RESPONSE_BYTES} bytes")
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise ViewError(f"{full}: not the service's JSON view ({exc})") from exc
    if not isinstance(doc, dict):
        raise ViewError(f"{full}: not the service's JSON view (not an object)")
    return doc
