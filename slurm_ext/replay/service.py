"""The priority service during a replay: `slurm-ext serve` with a generated config.

The service is the production command running the production policy code; only its
clock-based settings are scaled to the speedup, since it measures attained service in
wall seconds: queue limits, the Gittins grid's first point and min_run_s are divided by
the speedup, the pass interval too (down to 1 s, what a pass costs here).
"""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import sys
from pathlib import Path

from slurm_ext.core import tomlio
from slurm_ext.core.config import to_table
from slurm_ext.policy import PolicyConfig
from slurm_ext.replay.slurmconf import REQUEUE_HOLD_S

SITE_INTERVAL_S = 30.0  # etc/service.toml's interval_s
MIN_INTERVAL_S = 1.0


def service_interval_s(speedup: float) -> float:
    """The replay service's pass interval in wall seconds: a site's, scaled."""
    return max(MIN_INTERVAL_S, SITE_INTERVAL_S / speedup)


def with_checkpoints(policy: PolicyConfig, checkpoint_interval_s: float) -> PolicyConfig:
    """The policy told how often the replay's jobs checkpoint (trace seconds), so that its
    requeue cost rule weighs the work a requeue really loses; unchanged when they never do."""
    if checkpoint_interval_s <= 0:
        return policy
    return dataclasses.replace(policy, preemption_checkpoint_s=checkpoint_interval_s)


def with_requeue_hold(policy: PolicyConfig, speedup: float) -> PolicyConfig:
    """The policy's restart cost (trace seconds) plus the time Slurm holds a requeued job
    before it may run again (REQUEUE_HOLD_S wall seconds, i.e. x speedup in trace time):
    the victim's completion is delayed by that much, so the cost rule must weigh it."""
    return dataclasses.replace(
        policy, preemption_restart_s=policy.preemption_restart_s + REQUEUE_HOLD_S * speedup
    )


def scaled_policy(policy: PolicyConfig, speedup: float) -> PolicyConfig:
    """The policy with its trace-time settings expressed in wall seconds."""
    return dataclasses.replace(
        policy,
        queue_thresholds_gpu_s=[t / speedup for t in policy.queue_thresholds_gpu_s],
        min_run_s=policy.min_run_s / speedup,
        gittins_grid_start_gpu_s=policy.gittins_grid_start_gpu_s / speedup,
        preemption_checkpoint_s=policy.preemption_checkpoint_s / speedup,
        preemption_restart_s=policy.preemption_restart_s / speedup,
    )


def write_config(
    path: Path,
    slurm_conf: str,
    partition: str,
    speedup: float,
    preemption: bool,
    policy: PolicyConfig | None = None,
    checkpoint_interval_s: float = 0.0,
) -> Path:
    """service.toml for a replay (store beside it, no listener, this partition only)."""
    data = {
        "interval_s": service_interval_s(speedup),
        "store": str(path.parent / "service.db"),
        "port": 0,
        "partitions": [partition],
        "preemption": "requeue" if preemption else "off",
        "history_source": "store",
        "slurm": {"backend": "cli", "slurm_conf": slurm_conf, "timeout_s": 10.0},
        "policy": to_table(
            scaled_policy(
                with_requeue_hold(
                    with_checkpoints(policy or PolicyConfig(), checkpoint_interval_s), speedup
                ),
                speedup,
            )
        ),
    }
    path.write_text(tomlio.dumps(data))
    return path


def start(config: Path, log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "slurm_ext.cli", "serve", "--config", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def stop(proc: subprocess.Popen | None) -> None:
    """Stop the service we started, by its PID."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
