"""GPU counts from every spelling Slurm uses for generic resources.

Seen in the wild: `gres:gpu:4`, `gres/gpu:a100=2`, `gres/gpu=8`, `gpu:tesla:2(IDX:0-1)`,
`gpu:a100:4(S:0-1)`, `gres:gpu:a100:2,gres:shard:1`, `cpu=4,mem=8G,gres/gpu=2`, and the
same with `gpu` alone. Only the `gpu` resource counts; shards/mps are other resources.
"""

from __future__ import annotations

import re

_ITEM = re.compile(
    r"""^(?:gres[:/])?gpu          # resource name, with or without the gres prefix
        (?::(?P<type>[A-Za-z0-9_.\-]+?))?   # optional type
        (?:[:=](?P<count>\d+))?    # count, after ':' or '='
        (?:\(.*\))?$               # optional (IDX:..)/(S:..) suffix
    """,
    re.VERBOSE,
)


def _split_items(spec: str) -> list[str]:
    """Split on commas that are not inside parentheses (IDX lists contain commas)."""
    items, depth, cur = [], 0, []
    for ch in spec:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    items.append("".join(cur))
    return [i.strip() for i in items if i.strip()]


def parse_gpus(spec: str | None) -> tuple[int, str | None]:
    """Total GPUs and GPU type named in a gres/TRES string; (0, None) when none.

    A bare `gpu` with no count means 1, as in `--gres=gpu`.
    Raises ValueError on an item that names gpu but cannot be read.
    """
    if not spec or spec in ("(null)", "N/A"):
        return 0, None
    typed, untyped, gtype = 0, 0, None
    for item in _split_items(spec):
        low = item.lower()
        if not re.match(r"^(gres[:/])?gpu([:=(]|$)", low):
            continue
        m = _ITEM.match(item)
        if m is None:
            # "gpu:a100" has a type and no count; "gpu:4" a count and no type.
            raise ValueError(f"cannot read GPU count from {item!r} in {spec!r}")
        t, count = m.group("type"), m.group("count")
        if t is not None and t.isdigit() and count is None:
            t, count = None, t
        n = int(count) if count is not None else 1
        if t is None:
            untyped += n
        else:
            typed += n
            gtype = gtype or t
    # TRES strings list the total and the typed share both ("gres/gpu=2,gres/gpu:a100=2").
    if typed and untyped and "gres/" in spec:
        return untyped, gtype
    return typed + untyped, gtype


def job_gpus(
    tres_per_job: str | None,
    tres_per_node: str | None,
    tres_per_task: str | None = None,
    num_nodes: int = 1,
    num_tasks: int = 1,
    tres_alloc: str | None = None,
) -> tuple[int, int, str | None]:
    """(GPUs for the whole job, GPUs per node or 0, type) from a job's TRES fields.

    Allocated TRES win when present (a running job); otherwise the request: per job,
    else per node x nodes, else per task x tasks.
    """
    per_job, t1 = parse_gpus(tres_per_job)
    per_node, t2 = parse_gpus(tres_per_node)
    per_task, t3 = parse_gpus(tres_per_task)
    alloc, t4 = parse_gpus(tres_alloc)
    gtype = t1 or t2 or t3 or t4
    nodes = max(1, num_nodes)
    if alloc:
        total = alloc
    elif per_job:
        total = per_job
    elif per_node:
        total = per_node * nodes
    else:
        total = per_task * max(1, num_tasks)
    return total, per_node, gtype
