"""The co-location classes file: one file, read by the node agents and the service alike.

The agents pause opportunistic jobs beside guaranteed ones; the service requeues an
opportunistic job its agents kept paused too long (`[opportunistic] max_pause_s`). Both
must class every job the same way, so both read the lists from one file (etc/classes.toml,
installed as /etc/slurm-ext/classes.toml; each daemon's `classes_file` names another)
with `load_classes`, into `slurm_ext.core.model.JobClasses`.
"""

from __future__ import annotations

from pathlib import Path

from slurm_ext.core.config import load_config
from slurm_ext.core.model import JobClasses

DEFAULT_PATH = "/etc/slurm-ext/classes.toml"


def load_classes(path: str = "") -> JobClasses:
    """The classes `path` holds; a bad file is a `ConfigError` naming it and the key.
    "" (a daemon's default): DEFAULT_PATH where it exists, else the defaults it ships
    with (those of etc/classes.toml); a path that is set must exist."""
    if not path:
        if not Path(DEFAULT_PATH).is_file():
            return JobClasses()
        path = DEFAULT_PATH
    return load_config(JobClasses, path)
