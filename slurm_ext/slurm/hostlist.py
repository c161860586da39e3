"""Slurm hostlist expressions: `node[1-3,7],gpu[01-02]` <-> a list of names.

As Slurm's src/common/hostlist.c: names separated by commas or whitespace, ranges with
leading zeros fixing the width, several bracket groups per name (`rack[0-1]_blade[0-3]`,
and text after the last one, as Slurm 25.11 accepts), duplicates kept in order. A
reversed or empty range is refused, and so is a range over MAX_RANGE names or an
expression over MAX_NAMES (Slurm bounds ranges the same way, so that an expression such
as `a[0-999999999]` cannot exhaust memory). tests/test_hostlist.py checks the examples
of Slurm's man pages against these functions and, where it is installed, scontrol.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_RANGE = re.compile(r"^([0-9]{1,18})(?:-([0-9]{1,18}))?$")
_GROUP = re.compile(r"^([^\[\]]*)\[([^\]]+)\](.*)$")
MAX_RANGE = 64 * 1024  # Slurm's MAX_RANGE (MAX_SLURM_NODES)
MAX_NAMES = 1 << 20


def _split_top(expr: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in expr:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if (ch == "," or ch.isspace()) and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def expand_hostlist(expr: str | None, limit: int = MAX_NAMES) -> list[str]:
    """Expand a hostlist; raises ValueError naming the bad part, or saying that it names
    more than `limit` hosts (checked as it expands: no more are ever made)."""
    if not expr or expr in ("(null)", "None", "N/A"):
        return []
    limit = min(limit, MAX_NAMES)
    names: list[str] = []
    for part in _split_top(expr):
        names.extend(_expand_name(part, expr, limit))
        if len(names) > limit:
            raise ValueError(f"hostlist {expr[:80]!r} names more than {limit} hosts")
    return names


def _expand_name(part: str, expr: str, limit: int = MAX_NAMES) -> list[str]:
    """One name: its first bracket group times the expansion of the rest."""
    m = _GROUP.match(part)
    if not m:
        if "[" in part or "]" in part:
            raise ValueError(f"bad hostlist part {part!r} in {expr!r}")
        return [part]
    prefix, ranges, suffix = m.groups()
    numbers: list[str] = []
    for rng in ranges.split(","):
        r = _RANGE.match(rng.strip())
        if not r:
            raise ValueError(f"bad range {rng!r} in {expr!r}")
        lo, hi = r.group(1), r.group(2) or r.group(1)
        if int(hi) < int(lo):
            raise ValueError(f"reversed range {rng!r} in {expr!r}")
        if int(hi) - int(lo) + 1 > MAX_RANGE:
            raise ValueError(f"range {rng!r} in {expr[:80]!r} names more than {MAX_RANGE} hosts")
        if len(numbers) + int(hi) - int(lo) + 1 > limit:
            raise ValueError(f"hostlist {expr[:80]!r} names more than {limit} hosts")
        numbers.extend(f"{i:0{len(lo)}d}" for i in range(int(lo), int(hi) + 1))
    tails = _expand_name(suffix, expr, limit) if suffix else [""]
    if len(numbers) * len(tails) > limit:
        raise ValueError(f"hostlist {expr[:80]!r} names more than {limit} hosts")
    return [f"{prefix}{n}{t}" for n in numbers for t in tails]


def compress_hostlist(names: Iterable[str]) -> str:
    """The shortest common form Slurm accepts: `node[1-3,7]` (sorted, per prefix)."""
    numbered: list[tuple[str, str]] = []
    plain: list[str] = []
    for name in names:
        m = re.match(r"^(.*?)([0-9]+)$", name)
        if m:
            numbered.append((m.group(1), m.group(2)))
        else:
            plain.append(name)
    # A zero-padded number (`07`) fixes its group's width; an unpadded one joins the padded
    # group of its own length (`17` with `07`), else the unpadded group (width 0).
    padded = {(p, len(d)) for p, d in numbered if len(d) > 1 and d.startswith("0")}
    groups: dict[tuple[str, int], list[int]] = {}
    for prefix, digits in numbered:
        width = len(digits) if (prefix, len(digits)) in padded else 0
        groups.setdefault((prefix, width), []).append(int(digits))
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
