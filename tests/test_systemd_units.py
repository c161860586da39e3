"""The systemd units in etc/: hardened (systemd-analyze security's exposure score under a
bound), valid (systemd-analyze verify), and writable where the example configs write.

Scores measured with systemd 252 (Debian 12): before hardening the agent scored 9.6
(UNSAFE) and the service 5.8 (MEDIUM); now 3.5 and 1.6. The bounds keep a margin of
0.4-0.5 for another systemd's weights, and stay well under MEDIUM (5.0):
- agent 4.0: what is left is what it needs: root with CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH
  and CAP_KILL, the network, /dev (NVML) and a writable cgroup tree (freezing jobs);
- service 2.0: what is left is the network (slurmctld, reports), the host's users (munge
  credentials) and the system calls of an ordinary service.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from nodeagent.config import AgentConfig
from slurm_ext.core.config import load_config
from slurm_ext.service.loop import ServiceConfig

ETC = Path(__file__).resolve().parents[1] / "etc"
BOUNDS = {"slurm-ext-agent.service": 4.0, "slurm-ext.service": 2.0}
ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(
    ANALYZE is None, reason="systemd-analyze not installed (Debian: apt-get install systemd)"
)


def directives(unit: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in (ETC / unit).read_text().splitlines():
        if "=" in line and not line.lstrip().startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            out.setdefault(key.strip(), []).append(value.strip())
    return out


@needs_analyze
@pytest.mark.parametrize("unit", sorted(BOUNDS))
def test_exposure_score_is_under_its_bound(unit: str) -> None:
    out = subprocess.run(
        [ANALYZE, "security", "--offline=true", "--no-pager", str(ETC / unit)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", out.stdout + out.stderr)
    assert m, f"no score in systemd-analyze's output:\n{out.stdout}\n{out.stderr}"
    assert float(m.group(1)) < BOUNDS[unit], out.stdout


@needs_analyze
@pytest.mark.parametrize("unit", sorted(BOUNDS))
def test_unit_verifies(unit: str) -> None:
    out = subprocess.run(
        [ANALYZE, "verify", "--no-pager", str(ETC / unit)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    # The only complaint allowed: /opt/slurm-ext is not installed here.
    problems = [
        line
        for line in (out.stdout + out.stderr).splitlines()
        if line.strip() and "/opt/slurm-ext/.venv/bin/" not in line
    ]
    assert not problems, "\n".join(problems)


def test_the_agent_may_write_where_its_example_config_writes() -> None:
    cfg = load_config(AgentConfig, ETC / "agent.toml")
    unit = directives("slurm-ext-agent.service")
    assert unit["ProtectSystem"] == ["strict"]
    writable = [Path(p) for v in unit["ReadWritePaths"] for p in v.split()]
    writable += [Path("/var/lib") / d for d in unit["StateDirectory"]]
    for path in (Path(cfg.state_file), Path(cfg.report.spool_dir) / "batch.json"):
        assert any(path.is_relative_to(w) for w in writable), f"{path} is read-only for the agent"
    assert Path("/sys/fs/cgroup") in writable  # freezing a job's cgroup
    assert f"-m 0700 {cfg.report.spool_dir}" in unit["ExecStartPre"][0]
    caps = set(unit["CapabilityBoundingSet"][0].split())
    assert caps == {"CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH", "CAP_KILL"}
    for absent in ("PrivateDevices", "ProtectControlGroups", "ProtectKernelTunables"):
        assert absent not in unit, f"{absent} would take away /dev/nvidia* or /sys/fs/cgroup"


def test_the_service_may_write_its_store_and_nothing_else() -> None:
    cfg = load_config(ServiceConfig, ETC / "service.toml")
    unit = directives("slurm-ext.service")
    assert unit["ProtectSystem"] == ["strict"] and unit["CapabilityBoundingSet"] == [""]
    assert unit["ReadWritePaths"] == [str(Path(cfg.store).parent)]
