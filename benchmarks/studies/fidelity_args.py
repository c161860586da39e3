"""fidelity.py's command-line options, one definition for it and fidelity_predict.py."""

from __future__ import annotations

import argparse

from benchmarks.studies.fidelity_ensemble import DEFAULT, PERTURBATIONS
from slurm_ext.replay.plan import MODES


def parser(description: str = "") -> argparse.ArgumentParser:
    """fidelity.py's options (fidelity_predict.py reads the same simulator settings)."""
    ap = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--full", action="store_true", help="synth1,synth2,tiresias60, auto speedup")
    ap.add_argument("--traces", default=None, help="default: tiresias60 (--full: all three)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--jobs", type=int, default=150, help="jobs per synthetic trace")
    ap.add_argument("--load", type=float, default=1.0, help="synthetic offered load")
    ap.add_argument("--users", type=int, default=8, help="users of a usersN trace")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--gpus-per-node", type=int, default=4)
    ap.add_argument("--speedup", type=float, default=None, help="default: replay's auto speedup")
    ap.add_argument("--checkpoint-interval", type=float, default=1800.0)
    ap.add_argument("--preemptible-fraction", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--no-requeue-hold",
        dest="requeue_hold",
        action="store_false",
        help="simulate without Slurm's hold of requeued jobs (cred_expire + 1 wall s)",
    )
    ap.add_argument(
        "--exact-clock",
        dest="slurm_clock",
        action="store_false",
        help="simulate the service's history with exact run lengths, not Slurm's whole seconds",
    )
    ap.add_argument(
        "--exact-willrun",
        dest="willrun",
        action="store_false",
        help="plan blocked jobs at their exact earliest start, not in cons_tres's will-run batches",
    )
    ap.add_argument(
        "--no-sched-tick",
        dest="sched_tick",
        action="store_false",
        help="simulate Slurm's main scheduler at each submit, not at its next whole-second tick",
    )
    ap.add_argument(
        "--gpu-fit",
        dest="core_fit",
        action="store_false",
        help="start jobs by best fit on free GPUs, not on the nodes cons_tres picks by free cores",
    )
    ap.add_argument(
        "--gpu-resv",
        dest="whole_nodes",
        action="store_false",
        help="reserve a blocked job's GPUs only, not its nodes whole",
    )
    ap.add_argument(
        "--default-policy",
        dest="live_policy",
        action="store_false",
        help="simulate the service modes with today's PolicyConfig defaults, not the policy"
        " in the run's service.toml (fidelity_policy.py)",
    )
    ap.add_argument("--scheduler", default="slurm", choices=("slurm", "greedy", "strict"))
    ap.add_argument("--workdir", default=None, help="keep the replays' logs here")
    ap.add_argument(
        "--live-from",
        default=None,
        help="a --workdir of an earlier run (or several, comma-separated, read as repeats of"
        " the same cells): reuse its live rows, only simulate again",
    )
    ap.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="live replays per cell, one at a time (in <workdir>/r1, r2, ... when > 1)",
    )
    ap.add_argument(
        "--sim-ensemble",
        type=int,
        default=0,
        metavar="N",
        help="simulate each live run N more times under seeded perturbations of what the"
        " replay cannot control (fidelity_ensemble.py); report their mean, range and the"
        " live run's percentile",
    )
    ap.add_argument(
        "--perturb",
        default=",".join(DEFAULT),
        help=f"which perturbations the ensemble draws, of {','.join(PERTURBATIONS)}"
        f" (default {','.join(DEFAULT)}; fidelity_ensemble.py)",
    )
    return ap
