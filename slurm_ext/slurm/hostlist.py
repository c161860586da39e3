"""Slurm hostlist expressions: `node[1-3,7],gpu[01-02]` <-> a list of names."""

from __future__ import annotations

import re
from collections.abc import Iterable

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def _split_top(expr: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in expr:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def expand_hostlist(expr: str | None) -> list[str]:
    """Expand a hostlist; raises ValueError naming the bad part."""
    if not expr or expr in ("(null)", "None", "N/A"):
        return []
    names: list[str] = []
    for part in _split_top(expr):
        m = re.match(r"^([^\[\]]*)\[([^\]]+)\](.*)$", part)
        if not m:
            if "[" in part or "]" in part:
                raise ValueError(f"bad hostlist part {part!r} in {expr!r}")
            names.append(part)
            continue
        prefix, ranges, suffix = m.groups()
        for rng in ranges.split(","):
            r = _RANGE.match(rng.strip())
            if not r:
                raise ValueError(f"bad range {rng!r} in {expr!r}")
            lo, hi = r.group(1), r.group(2) or r.group(1)
            width = len(lo)
            for i in range(int(lo), int(hi) + 1):
                for name in expand_hostlist(f"{prefix}{i:0{width}d}{suffix}"):
                    names.append(name)
    return names


def compress_hostlist(names: Iterable[str]) -> str:
    """The shortest common form Slurm accepts: `node[1-3,7]` (sorted, per prefix)."""
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    for name in names:
        m = re.match(r"^(.*?)(\d+)$", name)
        if not m:
            plain.append(name)
            continue
        groups.setdefault((m.group(1), len(m.group(2))), []).append(int(m.group(2)))
    out = list(plain)
    for (prefix, width), nums in sorted(groups.items()):
        nums = sorted(set(nums))
        runs, start = [], nums[0]
        for a, b in zip(nums, nums[1:] + [None]):
            if b != a + 1:
                runs.append(
                    f"{start:0{width}d}" if start == a else f"{start:0{width}d}-{a:0{width}d}"
                )
                start = b
        out.append(f"{prefix}{runs[0]}" if len(nums) == 1 else f"{prefix}[{','.join(runs)}]")
    return ",".join(out)
