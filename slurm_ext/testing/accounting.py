"""slurmdbd for the local cluster: a private MariaDB and slurmdbd, both our children.

`LocalCluster(accounting=True)` uses this so sacct, fair-share and PriorityWeightAge work
(without slurmdbd Slurm ignores the age and fair-share weights). The database lives in
the cluster's directory (its own datadir from `mariadb-install-db`, a unix socket there,
a free loopback port); the system's mysqld/slurmdbd, their configs (`--no-defaults`) and
their state paths are never used. slurmdbd logs in over loopback TCP as a user with a
random password that only this cluster's files hold (mode 0600).

A `GpuQos` adds a QOS that caps the GPUs each user holds at once, the default QOS of the
given users, enforced (AccountingStorageEnforce=limits,qos): jobs past the cap pend.

Needs Debian's mariadb-server and slurmdbd (scripts/install-deps.sh).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SLURMDBD_CONF = """\
AuthType=auth/munge
AuthInfo=socket={sockets}/munge/munge.socket
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={dbd_port}
SlurmUser=root
PidFile={root}/run/slurmdbd.pid
LogFile={root}/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={db_port}
StorageUser=slurm
StoragePass={password}
StorageLoc=slurm_acct_db
"""

# Appended to slurm.conf: accounting through our slurmdbd, and the multifactor weights
# that only take effect with it (the base config sets them to 0; Slurm keeps the last).
# AccountingStoragePass names the munge socket clients use to reach slurmdbd.
ACCOUNTING_CONF = """\
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort={dbd_port}
AccountingStoragePass={sockets}/munge/munge.socket
JobAcctGatherType=jobacct_gather/none
AccountingStorageTRES=gres/gpu
PriorityWeightAge=1000
PriorityWeightFairshare=1000
"""

# Appended with a GpuQos: jobs must fit their association's and QOS's limits
ENFORCE_CONF = "AccountingStorageEnforce=limits,qos\n"

INIT_SQL = """\
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
"""


class AccountingError(RuntimeError):
    """MariaDB or slurmdbd did not come up; the message names the log to read."""


@dataclass(frozen=True)
class GpuQos:
    """A QOS of at most `gpus_per_user` GPUs per user at once (MaxTRESPerUser=gres/gpu=N),
    made the default QOS of `users` (associations under account `account`; `sacctmgr add
    cluster` makes root's)."""

    name: str = "gpu16"
    gpus_per_user: int = 4
    users: tuple[str, ...] = ("root",)
    account: str = "root"


def find_binary(name: str) -> str:
    """MariaDB's `name` (Debian's) on PATH or in /usr/sbin."""
    found = shutil.which(name) or (
        f"/usr/sbin/{name}" if Path(f"/usr/sbin/{name}").exists() else None
    )
    if found is None:
        raise AccountingError(
            f"{name} not found: install Debian's mariadb-server (scripts/install-deps.sh)"
        )
    return found


def wait_port(port: int, proc: subprocess.Popen, what: str, log: Path, timeout: float) -> None:
    """Return once 127.0.0.1:port accepts a connection; fail if `proc` exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AccountingError(f"{what} exited with {proc.returncode}; see {log}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise AccountingError(
        f"{what} not listening on 127.0.0.1:{port} after {timeout:.0f}s; see {log}"
    )


def write_files(
    root: Path, sockets: Path, db_port: int, dbd_port: int, enforce: bool = False
) -> str:
    """Write slurmdbd.conf and the DB's init SQL (0600, a fresh password); return the
    slurm.conf lines that point slurmctld at this slurmdbd (and, with `enforce`, make it
    enforce limits and QOS). sockets: where munge's socket is (`LocalCluster.sockets_dir()`)."""
    password = os.urandom(12).hex()
    for path, text in (
        (root / "etc" / "slurmdbd.conf", SLURMDBD_CONF),
        (root / "db" / "init.sql", INIT_SQL),
    ):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            text.format(
                root=root, sockets=sockets, db_port=db_port, dbd_port=dbd_port, password=password
            )
        )
        path.chmod(0o600)
    lines = ACCOUNTING_CONF.format(dbd_port=dbd_port, root=root, sockets=sockets)
    return lines + ENFORCE_CONF if enforce else lines


def mariadb_argv(root: Path, port: int, sockets: Path) -> list[str]:
    """A private mariadbd: our datadir, socket (in `sockets`, short) and port, no system
    option files."""
    db = root / "db"
    return [
        find_binary("mariadbd"),
        "--no-defaults",
        f"--datadir={db}/data",
        "--user=root",
        f"--socket={sockets}/mysqld.sock",
        f"--port={port}",
        "--bind-address=127.0.0.1",
        f"--pid-file={db}/mysqld.pid",
        f"--log-error={root}/log/mariadbd.log",
        f"--init-file={db}/init.sql",
        "--skip-name-resolve",
        "--performance-schema=OFF",
        "--innodb-buffer-pool-size=32M",
    ]


def install_db(root: Path) -> None:
    """Create the datadir once (mariadb-install-db, socket auth for root, no test DB)."""
    data = root / "db" / "data"
    if (data / "mysql").exists():
        return
    res = subprocess.run(
        [
            find_binary("mariadb-install-db"),
            "--no-defaults",
            f"--datadir={data}",
            "--user=root",
            "--auth-root-authentication-method=socket",
            "--skip-test-db",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if res.returncode != 0:
        raise AccountingError(f"mariadb-install-db failed: {res.stderr.strip()[-500:]}")


def register(env: dict[str, str], cluster_name: str, sacctmgr: str, timeout: float = 30.0) -> None:
    """Add the cluster to slurmdbd (`sacctmgr -i`: the cluster's own Slurm's), retrying
    while slurmdbd warms up."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        res = subprocess.run(
            [sacctmgr, "-i", "add", "cluster", cluster_name],
            env=env,
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        last = (res.stdout + res.stderr).strip()
        if res.returncode == 0 or "already exists" in last.lower():
            return
        time.sleep(0.5)
    raise AccountingError(f"sacctmgr add cluster {cluster_name} failed: {last}")


def sacctmgr_run(env: dict[str, str], sacctmgr: str, *args: str) -> str:
    """One `sacctmgr -i` command; AccountingError with its words when it fails."""
    res = subprocess.run(
        [sacctmgr, "-i", *args], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    out = (res.stdout + res.stderr).strip()
    if res.returncode != 0:
        raise AccountingError(f"sacctmgr {' '.join(args)} failed: {out}")
    return out


def add_gpu_qos(
    env: dict[str, str], cluster_name: str, sacctmgr: str, qos: GpuQos, timeout: float = 30.0
) -> None:
    """Create `qos` and make it the default QOS of its users: once slurmctld has
    registered gres/gpu with slurmdbd (before, sacctmgr knows no such TRES)."""
    limit = f"MaxTRESPerUser=gres/gpu={qos.gpus_per_user}"
    deadline = time.monotonic() + timeout
    while True:
        try:
            sacctmgr_run(env, sacctmgr, "add", "qos", qos.name, limit)
            break
        except AccountingError as exc:
            if "no TRES known" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    for user in qos.users:
        listed = sacctmgr_run(
            env, sacctmgr, "-n", "-P", "show", "assoc", "format=user",
            "where", f"user={user}", f"cluster={cluster_name}",
        )  # fmt: skip
        if user not in listed.split():
            sacctmgr_run(
                env,
                sacctmgr,
                "add",
                "user",
                user,
                f"account={qos.account}",
                f"cluster={cluster_name}",
            )
        sacctmgr_run(
            env, sacctmgr, "modify", "user", "where", f"name={user}", f"cluster={cluster_name}",
            "set", f"qos=normal,{qos.name}", f"defaultqos={qos.name}",
        )  # fmt: skip
