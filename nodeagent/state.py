"""The agent's state file: running totals, and the jobs it froze.

A pause is written here (fsync'd) before the job is frozen, so the agent killed at any
moment leaves a record to thaw from. Reading is forgiving: a truncated or corrupt file,
an unknown version or unknown keys are logged and what is readable is kept; the pause
records come first in the file and are salvaged from a truncated one, because losing
one leaves a job frozen for good (the agent also finds frozen jobs by their cgroups at
start). A file that is not a JSON object is set aside for whoever investigates.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from nodeagent.accounts import JobAccount
from nodeagent.freezer import PauseRecord
from slurm_ext.policy import colocation as co

log = logging.getLogger(__name__)
STATE_VERSION = 1
# one pause record as json.dumps writes it (the salvage of a truncated file)
_PAUSE_RE = re.compile(
    r'\{"job_id": (\d+), "method": "(cgroup-v2|cgroup-v1|sigstop)", "targets": (\[[^\]]*\])\}'
)


@dataclass
class LoadedState:
    doc: dict  # the top-level fields that could be read ({} when none)
    paused: list[PauseRecord] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # what was wrong, for the log
    corrupt: bool = False  # not a JSON object (empty, truncated, garbage)


def lock_state(path: Path) -> int | None:
    """Hold `<state file>.lock` for this process's life (the fd is kept open): one agent,
    or one `thaw`, per state file at a time. None when another process holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def write_state(path: Path, doc: dict) -> None:
    """Replace the file atomically and durably (data and rename fsync'd); OSError on
    failure. `paused` is written first so a torn write loses it last."""
    ordered = {"paused": doc.get("paused", []), **doc}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(ordered))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_state(path: Path) -> LoadedState | None:
    """What can be read of the file; None when there is none."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return None
    except OSError as exc:
        return LoadedState({}, problems=[f"unreadable ({exc.strerror or exc})"])
    try:
        doc = json.loads(text)
    except ValueError as exc:
        doc = None
        problem = f"truncated or corrupt ({exc})"
    else:
        problem = "" if isinstance(doc, dict) else "not a JSON object"
    if not isinstance(doc, dict):
        paused = salvage_pauses(text)
        found = f"{problem}: kept {len(paused)} pause records found in it"
        return LoadedState({}, paused, [found], corrupt=True)
    out = LoadedState(doc)
    if doc.get("version") != STATE_VERSION:
        out.problems.append(f"version {doc.get('version')!r}, expected {STATE_VERSION}")
    raw = doc.get("paused", [])
    for i, d in enumerate(raw if isinstance(raw, list) else []):
        try:
            out.paused.append(PauseRecord.from_dict(d))
        except (KeyError, TypeError, ValueError) as exc:
            out.problems.append(f"paused[{i}] unreadable ({exc!r}): skipped")
    if not isinstance(raw, list):
        out.problems.append("'paused' is not a list")
    return out


def set_aside(path: Path, wall: float) -> Path:
    """Move a corrupt state file to `<name>.corrupt-<UTC time>` (kept for whoever looks
    into it; the agent then writes a fresh one); OSError when it cannot be moved."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(wall))
    aside = path.with_name(f"{path.name}.corrupt-{stamp}")
    os.replace(path, aside)
    return aside


def salvage_pauses(text: str) -> list[PauseRecord]:
    """Every complete pause record in a damaged file."""
    out = []
    for m in _PAUSE_RE.finditer(text):
        try:
            targets = json.loads(m.group(3))
        except ValueError:
            continue
        if isinstance(targets, list):
            out.append(PauseRecord(int(m.group(1)), m.group(2), [str(t) for t in targets]))
    return out


def restore_totals(
    doc: dict, path: Path, accounts: dict[int, JobAccount], co_state: co.CoState
) -> tuple[dict[str, float], float]:
    """Fill `accounts` and `co_state` from a state document, part by part: a part that
    cannot be read is logged and skipped, unknown keys are logged and ignored. Returns
    the node's energy totals (GPU joules per uuid, CPU joules)."""
    energy: dict[str, Any] = {"gpu_energy_total": {}, "cpu_energy_total": 0.0}
    known = {f.name for f in fields(JobAccount)}
    for i, d in enumerate(doc.get("accounts", [])):
        try:
            extra = set(d) - known
            if extra:
                log.error("state file %s: accounts[%d]: unknown %s ignored", path, i, extra)
            a = JobAccount(**{k: v for k, v in d.items() if k in known})
            accounts[int(a.job_id)] = a
        except (TypeError, ValueError, AttributeError) as exc:
            log.error("state file %s: accounts[%d] unreadable (%s): skipped", path, i, exc)
    parts = {
        "gpu_energy_total": lambda v: {str(k): float(x) for k, x in v.items()},
        "cpu_energy_total": float,
        "solo_util": lambda v: {int(k): float(x) for k, x in v.items()},
        "solo_rate": lambda v: {int(k): float(x) for k, x in v.items()},
        "solo_rate_n": lambda v: {int(k): int(x) for k, x in v.items()},
        # EaCO verdicts: a withdrawn admission must not be given again after a restart
        "eaco_admitted": lambda v: {int(j) for j in v},
        "eaco_refused": lambda v: {int(k): str(x) for k, x in v.items()},
    }
    for name, load in parts.items():
        if name not in doc:
            continue
        try:
            value = load(doc[name])
        except (TypeError, ValueError, AttributeError) as exc:
            log.error("state file %s: %s unreadable (%s): skipped", path, name, exc)
            continue
        if name in energy:
            energy[name] = value
        elif name == "eaco_admitted":
            co_state.admitted = value
        elif name == "eaco_refused":
            co_state.refused = value
        else:
            setattr(co_state, name, value)
    return energy["gpu_energy_total"], energy["cpu_energy_total"]


def state_doc(
    paused: Iterable[PauseRecord],
    accounts: Iterable[JobAccount],
    gpu_energy_total: dict[str, float],
    cpu_energy_total: float,
    co_state: co.CoState,
    saved_at: float,
) -> dict:
    """The document `write_state` writes; pause records first (see `salvage_pauses`)."""
    return {
        "paused": [r.to_dict() for r in paused],
        "version": STATE_VERSION,
        "saved_at": saved_at,
        "accounts": [dict(vars(a), gpu_uuids=list(a.gpu_uuids)) for a in accounts],
        "gpu_energy_total": gpu_energy_total,
        "cpu_energy_total": cpu_energy_total,
        "solo_util": {str(k): v for k, v in co_state.solo_util.items()},
        "solo_rate": {str(k): v for k, v in co_state.solo_rate.items()},
        "solo_rate_n": {str(k): v for k, v in co_state.solo_rate_n.items()},
        "eaco_admitted": sorted(co_state.admitted),
        "eaco_refused": {str(k): v for k, v in co_state.refused.items()},
    }
