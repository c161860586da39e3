"""The files the package ships from etc/ (the submit hook, example configs, systemd units,
Prometheus and Grafana files, a sample trace), and writing them out for an admin.

They are package data read with importlib.resources, so an install from a wheel finds
them as a checkout does: in the repository `slurm_ext/etc` is a link to `etc/`, and the
wheel carries copies under `slurm_ext/etc/` (pyproject.toml's package-data).
"""

from __future__ import annotations

import os
import tempfile
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

SUBDIRS = ("traces",)  # shipped sub-directories of etc/


def _etc() -> Traversable:
    return files("slurm_ext") / "etc"


def shipped_names() -> list[str]:
    """Every shipped file, as a path relative to etc/ (e.g. `traces/tiresias-60job.csv`)."""
    names = []
    for entry in _etc().iterdir():
        if entry.is_file():
            names.append(entry.name)
        elif entry.name in SUBDIRS:
            names.extend(f"{entry.name}/{sub.name}" for sub in entry.iterdir() if sub.is_file())
    return sorted(names)


def shipped_file(name: str) -> Traversable:
    """A shipped file by its name in etc/; KeyError (listing the names) for any other."""
    if name not in shipped_names():
        raise KeyError(f"{name!r} is not a shipped file (shipped: {', '.join(shipped_names())})")
    entry = _etc()
    for part in name.split("/"):
        entry = entry / part
    return entry


def write_file(path: str | Path, text: str, force: bool = False, mode: int = 0o644) -> None:
    """Write `text` to `path` whole or not at all: readers (slurmctld reading the hook)
    never see half a file. An existing file is kept unless `force` (FileExistsError)."""
    path = Path(path)
    if path.exists() and not force:
        raise FileExistsError(f"{path} exists (use --force to replace it)")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        if force:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # fails if the path appeared meanwhile: never clobbers
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
