"""Which nodes cons_tres gives a starting job when it weighs free cores, not free GPUs.

Slurm's select/cons_tres picks a job's nodes in `_eval_nodes_consec`
(topology/common/eval_nodes.c in 25.11; the replay's 22.05 places as it on the live
logs below): the nodes that can hold the job form runs of consecutive nodes; it takes
the run with enough nodes and the fewest available CPUs (ties: the first), its first
nodes, or for a one-node job the node of that run with the fewest available CPUs
("best fit single node", ties: the first). The weight is CPUs, not GPUs. A replay's job
asks for one CPU per node (`-N n --gres=gpu:g`), so a node's free CPUs fall by one per
job it runs, whatever its GPUs: a one-GPU job goes next to the most jobs, not into the
fullest node by GPUs. Six live replays of a synthetic trace (the fidelity harness,
bench_fidelity) follow this rule in 396 of the 405 Slurm-alone starts where nodes had
room and 412 of 427 in the service mode; best fit on free GPUs (`policy.choose_gpus`,
the simulator's default) in 368 and 385.

`SimConfig.fit_cores` > 0 (the cores per node) turns this on for the "slurm"
scheduler's starts, main scheduler and backfill alike (`sim.scheduler`); a node's free
cores are then `fit_cores` less one per running job there. Left out: the will-run
test's node choice for a reservation (`sim.willrun._consec_fit` still weighs GPUs) and
jobs that spread unevenly over several nodes (`--gpus=N`), which keep `choose_gpus`.
"""

from __future__ import annotations

from collections.abc import Mapping

from slurm_ext.policy import min_nodes

Alloc = list[tuple[str, int]]


def cores_fit(
    offers: Mapping[str, int], gpus: int, capacity: int, free_cores: Mapping[str, int]
) -> Alloc | None:
    """The job's GPUs where cons_tres puts them (module docstring), the same share on
    each node; None if they do not fit. For one-node and whole-node jobs (`fits_evenly`).
    With no run long enough, cons_tres takes the run with the most CPUs first, then the
    next (its "not sufficient" case): so here.

    offers: the GPUs each node can give the job now, in node order (Slurm's bitmap
    order); free_cores: each node's available cores (a node missing counts none)."""
    if gpus <= 0:
        return None
    m = min_nodes(gpus, capacity) if gpus > capacity else 1
    share = -(-gpus // m)
    runs: list[list[str]] = [[]]
    for n, o in offers.items():
        if o >= share and free_cores.get(n, 0) > 0:
            runs[-1].append(n)
        elif runs[-1]:
            runs.append([])
    runs = [r for r in runs if r]

    def weight(n: str) -> int:
        return free_cores.get(n, 0)

    enough = [r for r in runs if len(r) >= m]
    if enough:
        run = min(enough, key=lambda r: sum(map(weight, r)))  # first of the tightest
        picked = [min(run, key=weight)] if m == 1 else run[:m]
    else:
        nodes = [n for r in sorted(runs, key=lambda r: -sum(map(weight, r))) for n in r]
        if len(nodes) < m:
            return None
        picked = nodes[:m]
    alloc = [(n, share) for n in picked]
    alloc[-1] = (picked[-1], gpus - share * (m - 1))
    return alloc


def fits_evenly(gpus: int, capacity: int) -> bool:
    """Whether cons_tres's request for this job is one node or whole nodes (`-N1
    --gres=gpu:g` or `-N n --gres=gpu:capacity`), the shapes `cores_fit` places."""
    return gpus <= capacity or gpus % capacity == 0
