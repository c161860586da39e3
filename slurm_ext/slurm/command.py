"""Running one Slurm client command, bounded: the one subprocess wrapper of slurm/.

Every Slurm command the suite runs (squeue, sinfo, scontrol, sprio, sacct, --version)
goes through `run_command`, so a hung slurmctld or slurmdbd costs at most `timeout`
and a missing client install says so in the same words everywhere.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence

from slurm_ext.slurm.client import SlurmError, SlurmUnavailable

MAX_MESSAGE = 2000  # characters of Slurm's own words kept in an error


def slurm_env(slurm_conf: str | None = None) -> dict[str, str]:
    """This process's environment, pointing Slurm's commands at `slurm_conf` if given."""
    env = dict(os.environ)
    if slurm_conf:
        env["SLURM_CONF"] = slurm_conf
    return env


def run_command(
    argv: Sequence[str],
    timeout: float,
    env: Mapping[str, str] | None = None,
    stdin: str | None = None,
    bin_dir: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `argv` (its first word looked up in `bin_dir`, else on PATH) within `timeout`
    seconds; the exit status is the caller's to judge.

    Raises SlurmUnavailable when it gives no answer in time, SlurmError when the command
    is not installed. Errors name the command as written (without `bin_dir`)."""
    cmd = " ".join(argv)
    exe = os.path.join(bin_dir, argv[0]) if bin_dir else argv[0]
    try:
        return subprocess.run(
            [exe, *argv[1:]],
            input=stdin,
            env=dict(env) if env is not None else None,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise SlurmUnavailable(cmd, f"no answer within {timeout:.0f}s") from exc
    except FileNotFoundError as exc:
        raise SlurmError(cmd, f"{argv[0]} not found on PATH (install slurm-client)") from exc


def failure_message(res: subprocess.CompletedProcess[str]) -> str:
    """What a failed command said: its stderr, else its stdout, else its exit status."""
    return (res.stderr.strip() or res.stdout.strip() or f"exit {res.returncode}")[:MAX_MESSAGE]
