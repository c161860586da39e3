"""Pick the SlurmClient backend: pyslurm where it matches the running Slurm, else the CLI.

pyslurm X.Y.* is built against Slurm X.Y and only works with that release, so "auto"
compares pyslurm's major.minor with what `scontrol --version` reports. The choice and the
reason are logged on the "slurm_ext.slurm" logger.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import re

from slurm_ext.slurm.cli_backend import CliSlurmClient
from slurm_ext.slurm.client import SlurmClient, SlurmError, SlurmUnavailable
from slurm_ext.slurm.command import run_command, slurm_env

log = logging.getLogger("slurm_ext.slurm")

BACKENDS = ("auto", "pyslurm", "cli")
_VERSION = re.compile(r"(\d+)\.(\d+)")


def parse_version(text: str) -> tuple[int, int] | None:
    """(major, minor) from "slurm 22.05.8", "slurm-wlm 22.05.8" or "25.11.2"."""
    m = _VERSION.search(text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def slurm_version(
    slurm_conf: str | None = None, timeout: float = 30.0
) -> tuple[tuple[int, int] | None, str]:
    """The running Slurm's (major, minor) and how it was found, or (None, why not).

    Slurm's commands read slurm.conf even for --version (and retry for a minute when it
    is missing), hence the SLURM_CONF and the timeout.
    """
    env = slurm_env(slurm_conf)
    problems = []
    for cmd in ("scontrol", "sinfo"):
        try:
            res = run_command([cmd, "--version"], timeout, env)
        except SlurmUnavailable:
            problems.append(f"{cmd} --version gave no answer within {timeout:.0f}s")
            continue
        except SlurmError:
            problems.append(f"{cmd} not on PATH")
            continue
        out = res.stdout.strip()
        version = parse_version(out) if res.returncode == 0 else None
        if version:
            return version, f"`{cmd} --version` says {out!r}"
        detail = (res.stderr.strip() or out or f"exit {res.returncode}").splitlines()[-1:]
        problems.append(f"{cmd} --version failed: {' '.join(detail)}")
    return None, "; ".join(problems)


def pyslurm_version() -> tuple[tuple[int, int] | None, str]:
    """pyslurm's (major, minor) from its installed metadata, without importing it.

    Importing pyslurm initialises libslurm (reads slurm.conf), so it is not done here.
    """
    if importlib.util.find_spec("pyslurm") is None:
        return None, "pyslurm is not installed"
    try:
        text = importlib.metadata.version("pyslurm")
    except importlib.metadata.PackageNotFoundError:
        return None, "pyslurm is importable but has no package metadata (version unknown)"
    version = parse_version(text)
    return version, f"pyslurm {text}"


def make_client(
    backend: str = "auto", slurm_conf: str | None = None, timeout: float = 30.0
) -> SlurmClient:
    """A SlurmClient for `backend`: "auto", "pyslurm" or "cli".

    "auto" takes pyslurm when it is installed and its major.minor equals the running
    Slurm's, else the CLI backend. "pyslurm" insists (SlurmError when it is missing or
    built for another release); "cli" uses squeue/sinfo/scontrol. `slurm_conf` reaches
    both: the CLI passes it to each command; for pyslurm it is written to
    os.environ["SLURM_CONF"] just before pyslurm is imported (pyslurm reads it once,
    defaulting to /etc/slurm/slurm.conf). `timeout` bounds each CLI command and the
    version probe; pyslurm calls are bounded by Slurm's own MessageTimeout.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown Slurm backend {backend!r}; allowed: {', '.join(BACKENDS)}")
    if backend == "cli":
        log.info("Slurm backend: cli (asked for explicitly)")
        return CliSlurmClient(slurm_conf=slurm_conf, timeout=timeout)

    # Imported here so the CLI path never touches the optional backend module.
    from slurm_ext.slurm.pyslurm_backend import PySlurmClient

    py_ver, py_why = pyslurm_version()
    if backend == "pyslurm":
        if py_ver is not None:
            slurm_ver, slurm_why = slurm_version(slurm_conf, timeout)
            if slurm_ver is not None and slurm_ver != py_ver:
                raise SlurmError(
                    "import pyslurm",
                    f"{py_why} is built for Slurm {py_ver[0]}.{py_ver[1]:02d} but {slurm_why}; "
                    "install the pyslurm release matching your Slurm, or use backend 'cli'",
                )
            if slurm_ver is None:
                log.warning("cannot check pyslurm against the running Slurm: %s", slurm_why)
        client = PySlurmClient(slurm_conf=slurm_conf)  # SlurmError when not importable
        log.info("Slurm backend: pyslurm (asked for explicitly; %s)", py_why)
        return client

    if py_ver is None:
        log.info("Slurm backend: cli (%s)", py_why)
        return CliSlurmClient(slurm_conf=slurm_conf, timeout=timeout)
    slurm_ver, slurm_why = slurm_version(slurm_conf, timeout)
    if slurm_ver is None:
        log.info("Slurm backend: cli (%s; Slurm version unknown: %s)", py_why, slurm_why)
        return CliSlurmClient(slurm_conf=slurm_conf, timeout=timeout)
    if slurm_ver != py_ver:
        log.info("Slurm backend: cli (%s does not match Slurm: %s)", py_why, slurm_why)
        return CliSlurmClient(slurm_conf=slurm_conf, timeout=timeout)
    try:
        client = PySlurmClient(slurm_conf=slurm_conf)
    except SlurmError as exc:
        log.warning("Slurm backend: cli (%s matches Slurm but failed to load: %s)", py_why, exc)
        return CliSlurmClient(slurm_conf=slurm_conf, timeout=timeout)
    log.info("Slurm backend: pyslurm (%s matches Slurm: %s)", py_why, slurm_why)
    return client
