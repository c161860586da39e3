"""Install-time rendering of etc/job_submit.lua: set its four settings lines safely.

The Lua source is package data (slurm_ext.core.resources), so this works from a wheel."""

from __future__ import annotations

import re
from pathlib import Path

from slurm_ext.core.resources import shipped_file

HOOK_SOURCE = shipped_file("job_submit.lua")
_PATH_RE = re.compile(r"/[A-Za-z0-9._/+-]{1,4000}")


def render_hook(
    table_path: str | Path,
    respect_explicit_cpus: bool = True,
    max_cpus_per_gpu: int = 0,
    gpus_per_node: int = 0,
    source: str | None = None,
) -> str:
    """The hook's Lua source with its settings set; refuses a path needing Lua escapes."""
    path = str(table_path)
    if not _PATH_RE.fullmatch(path):
        raise ValueError(f"table_path {path!r}: use an absolute path of letters, digits and ._/+-")
    if (
        isinstance(max_cpus_per_gpu, bool)
        or not isinstance(max_cpus_per_gpu, int)
        or not 0 <= max_cpus_per_gpu <= 1024
    ):
        raise ValueError(f"max_cpus_per_gpu {max_cpus_per_gpu!r}: expected an integer in 0..1024")
    if (
        isinstance(gpus_per_node, bool)
        or not isinstance(gpus_per_node, int)
        or not 0 <= gpus_per_node <= 1024
    ):
        raise ValueError(f"gpus_per_node {gpus_per_node!r}: expected an integer in 0..1024")
    text = source if source is not None else HOOK_SOURCE.read_text()
    settings = {
        "TABLE_PATH": f'"{path}"',
        "RESPECT_EXPLICIT_CPUS": "true" if respect_explicit_cpus else "false",
        "MAX_CPUS_PER_GPU": str(max_cpus_per_gpu),
        "GPUS_PER_NODE": str(gpus_per_node),
    }
    for name, value in settings.items():
        text, n = re.subn(rf"(?m)^local {name} = .*$", f"local {name} = {value}", text, count=1)
        if n != 1:
            raise ValueError(f"hook source has no 'local {name} = ...' line")
    return text
