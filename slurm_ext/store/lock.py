"""One service per store: an flock on `<store>.lock`, held for the service's lifetime.

Two services on one store would each write every value and record every stint twice;
the kernel drops the lock when its holder ends, however it ends, so a crash leaves
nothing to clean up.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from slurm_ext.store.db import StoreError


class StoreLocked(StoreError):
    """Another process (another `slurm-ext serve`) holds the store's instance lock."""


def lock_store(path: str | Path) -> IO[str]:
    """Take the store's instance lock, `<store>.lock` beside it, for as long as the returned
    file stays open (the kernel drops it when the process ends, however it ends).

    Two services on one store would each write every value and record every stint."""
    lock_path = Path(f"{path}.lock")
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(lock_path, "a+")  # noqa: SIM115 - held open for the service's lifetime
    except OSError as exc:
        raise StoreError(f"{lock_path}: cannot open the store's lock file: {exc}") from exc
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.seek(0)
        holder = fh.read(32).strip()
        fh.close()
        raise StoreLocked(
            f"{path}: another slurm-ext service (pid {holder if holder.isdigit() else '?'}) "
            f"is using this store (lock {lock_path}); stop it first, or give this one "
            "another store"
        ) from None
    fh.seek(0)
    fh.truncate()
    fh.write(f"{os.getpid()}\n")
    fh.flush()
    return fh
