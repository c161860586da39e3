"""A real Slurm cluster on one machine: munged, one slurmctld and N slurmd on loopback.

Used by the tests and `make demo`. Everything lives in one directory (config, state,
logs, fake GPU device files, a private munge socket and key), ports are picked free, and
every daemon is our child process, stopped by its PID. Nothing already running on the
machine is touched, so several clusters can run side by side.

Needs Debian's slurmctld, slurmd, slurm-client and munge (scripts/install-deps.sh), or a
Slurm installed under a prefix (`prefix=`, e.g. 25.11 from scripts/install-slurm2511.sh):
every program is looked up by `LocalCluster.binary`, the prefix first.

Homogeneous by default (`nodes` x `gpus_per_node`, one partition); with `node_groups`
heterogeneous: typed GPUs, a partition per group (cluster_conf.NodeGroup), and with
`accounting` and `gpu_qos` a QOS capping each user's GPUs (accounting.GpuQos).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from slurm_ext.slurm.factory import parse_version
from slurm_ext.testing import accounting
from slurm_ext.testing.cluster_conf import NodeGroup, gres_conf_text, slurm_conf_text

# Where scripts/install-slurm2511.sh records the Slurm 25.11 prefix it built (repo-relative).
SLURM2511_PREFIX_FILE = Path(__file__).resolve().parents[2] / ".venv" / "slurm2511-prefix"


def slurm2511_prefix() -> tuple[Path | None, str]:
    """The built Slurm 25.11 prefix ($SLURM_EXT_SLURM2511_PREFIX, else the one the install
    script recorded), or (None, why not) so tests can skip saying why."""
    text = os.environ.get("SLURM_EXT_SLURM2511_PREFIX", "")
    if not text and SLURM2511_PREFIX_FILE.exists():
        text = SLURM2511_PREFIX_FILE.read_text().strip()
    if not text:
        return None, (
            "Slurm 25.11 is not built: run scripts/install-slurm2511.sh (needs the "
            "Slurm 25.11.2 source tarball) or set SLURM_EXT_SLURM2511_PREFIX"
        )
    prefix = Path(text)
    if not (prefix / "sbin" / "slurmctld").exists():
        return None, f"no sbin/slurmctld under Slurm 25.11 prefix {prefix}"
    return prefix, f"Slurm 25.11 at {prefix}"


# deepest root whose sockets stay inside the 108 bytes a unix socket path allows: the
# longest is slurmstepd's, "/spool/slurmd-node12/node12_1234567.4294967291" (46 bytes)
SOCKET_ROOT_MAX = 56


class ClusterError(RuntimeError):
    """The local cluster could not be started or driven; the message names the log to read."""


# Where the kernel takes source ports for outgoing connections from (Linux's default);
# read from /proc where there is one
EPHEMERAL_PORTS = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 10000


def ephemeral_range() -> tuple[int, int]:
    try:
        low, high = EPHEMERAL_PORTS.read_text().split()[:2]
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_ports(n: int) -> list[int]:
    """`n` distinct loopback ports free now, below the ephemeral range: a daemon binds its
    port seconds later (after MariaDB and slurmdbd start), and a port of that range can be
    taken meanwhile as the source port of any connection on the machine, so the daemon
    failed with "Address already in use" while other tests made many connections."""
    low = ephemeral_range()[0]
    candidates = list(range(LOWEST_PORT, low)) if low > LOWEST_PORT + 4 * n else []
    random.shuffle(candidates)
    ports: list[int] = []
    for port in candidates:
        if len(ports) == n:
            return ports
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
    socks = []  # no such range here: the kernel's pick
    try:
        while len(ports) < n:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


@dataclass
class LocalCluster:
    """A throw-away Slurm cluster. `start()` returns when every node is idle."""

    nodes: int = 4
    gpus_per_node: int = 4
    cpus_per_node: int = 16
    memory_mb: int = 64000
    partition: str = "gpu"
    cluster_name: str = "slurmext"
    root: Path | None = None
    job_submit_lua: str | None = None  # Lua source; enables JobSubmitPlugins=lua
    extra_conf: str = ""
    prefix: Path | None = None  # a Slurm installation; None: Debian's programs on PATH
    accounting: bool = False  # a private MariaDB + slurmdbd (testing/accounting.py)
    # > 0: gres/shard for opportunistic jobs, `shards_per_gpu` jobs per GPU in all (the
    # whole-GPU one included) and partition `share_partition` (cluster_conf.SHARD_GRES_CONF)
    shards_per_gpu: int = 0
    share_partition: str = "opp"
    # non-empty: a heterogeneous cluster, these groups' nodes and partitions in place of
    # `nodes`, `gpus_per_node`, `cpus_per_node`, `memory_mb` and `partition`
    node_groups: Sequence[NodeGroup] = ()
    gpu_qos: accounting.GpuQos | None = None  # with accounting: every job in this GPU-capping QOS
    _procs: dict[str, subprocess.Popen] = field(default_factory=dict, repr=False)
    _owns_root: bool = field(default=False, repr=False)
    _version: tuple[int, int] | None = field(default=None, repr=False)
    _short_sockets: Path | None = field(default=None, repr=False)

    # ---- layout -------------------------------------------------------------------
    @property
    def node_names(self) -> list[str]:
        if self.node_groups:
            return [name for g in self.node_groups for name in g.node_names]
        return [f"node{i}" for i in range(1, self.nodes + 1)]

    @property
    def partition_names(self) -> list[str]:
        """The partitions jobs run in (the shard partition aside): one, or one per group."""
        if self.node_groups:
            return [g.name for g in self.node_groups]
        return [self.partition]

    @property
    def conf_path(self) -> Path:
        assert self.root is not None
        return self.root / "etc" / "slurm.conf"

    @property
    def bin_dir(self) -> str | None:
        """Where this cluster's client commands live (CliSlurmClient(bin_dir=...)); None: PATH."""
        return str(self.prefix / "bin") if self.prefix is not None else None

    def binary(self, name: str) -> str:
        """The program `name` (slurmctld, slurmd, slurmdbd, munged, sinfo...): from the
        prefix's sbin/ or bin/ when it has one, else PATH or /usr/sbin (munge is Debian's)."""
        if self.prefix is not None:
            for sub in ("sbin", "bin"):
                path = self.prefix / sub / name
                if path.exists():
                    return str(path)
        found = shutil.which(name) or (
            f"/usr/sbin/{name}" if Path(f"/usr/sbin/{name}").exists() else None
        )
        if found is None:
            where = f"under {self.prefix} or " if self.prefix is not None else ""
            raise ClusterError(
                f"{name} not found {where}on PATH: install Debian's slurmctld slurmd "
                "slurm-client munge (scripts/install-deps.sh)"
            )
        return found

    @property
    def version(self) -> tuple[int, int]:
        """The (major, minor) of the slurmctld this cluster runs."""
        if getattr(self, "_version", None) is None:
            out = subprocess.run(
                [self.binary("slurmctld"), "-V"], capture_output=True, text=True, timeout=30
            ).stdout
            version = parse_version(out)
            if version is None:
                raise ClusterError(f"cannot read the Slurm version from slurmctld -V: {out!r}")
            self._version = version
        return self._version

    @property
    def env(self) -> dict[str, str]:
        """Environment for Slurm client commands aimed at this cluster."""
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.conf_path)
        if self.prefix is not None:
            env["PATH"] = f"{self.prefix}/bin:{self.prefix}/sbin:{env.get('PATH', '')}"
        env.pop("SQUEUE_FORMAT", None)
        env.pop("SQUEUE_SORT", None)
        return env

    def log(self, daemon: str = "slurmctld") -> str:
        assert self.root is not None
        path = self.root / "log" / f"{daemon}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    # ---- lifecycle ----------------------------------------------------------------
    def start(self, timeout: float = 60.0) -> LocalCluster:
        for tool in ("munged", "slurmctld", "slurmd", "sinfo"):
            self.binary(tool)  # ClusterError naming what is missing
        if self.gpu_qos is not None and not self.accounting:
            raise ClusterError("gpu_qos needs accounting=True (QOS live in slurmdbd)")
        if self.root is None:
            self.root = Path(tempfile.mkdtemp(prefix="slurm-ext-cluster-"))
            self._owns_root = True
        self.root.mkdir(parents=True, exist_ok=True)
        self._write_files()
        try:
            self._start_munge()
            if self.accounting:
                self._start_accounting(timeout)
            self.start_slurmctld()
            for name in self.node_names:
                self._spawn(
                    f"slurmd-{name}",
                    [self.binary("slurmd"), "-D", "-f", str(self.conf_path), "-N", name],
                )
            self.wait_idle(timeout)
            if self.gpu_qos is not None:  # needs gres/gpu, which slurmctld registers
                accounting.add_gpu_qos(
                    self.env, self.cluster_name, self.binary("sacctmgr"), self.gpu_qos, timeout
                )
        except BaseException:
            self.stop()
            raise
        return self

    def _write_files(self) -> None:
        root = self.root
        assert root is not None
        for sub in ("etc", "state", "run", "log", "dev", "jobs"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        sockets = self.sockets_dir()
        (sockets / "munge").mkdir(parents=True, exist_ok=True)
        for name in self.node_names:
            (sockets / "spool" / f"slurmd-{name}").mkdir(parents=True, exist_ok=True)
        g = max(grp.gpus for grp in self.node_groups) if self.node_groups else self.gpus_per_node
        for i in range(2 * g if self.shards_per_gpu > 0 else g):
            self._fake_gpu(root / "dev" / f"gpu{i}")
        ports = free_ports(len(self.node_names) + 1)
        self.ctld_port, node_ports = ports[0], ports[1:]
        job_submit = ""
        if self.job_submit_lua is not None:
            (root / "etc" / "job_submit.lua").write_text(self.job_submit_lua)
            job_submit = "JobSubmitPlugins=lua"
        self.conf_path.write_text(
            slurm_conf_text(self, self.ctld_port, node_ports, sockets, job_submit)
        )
        if self.accounting:
            self._write_accounting_files()
        (root / "etc" / "gres.conf").write_text(gres_conf_text(self))

    def _fake_gpu(self, path: Path) -> None:
        """A GPU device file for gres.conf: a plain file is enough for 22.05; later slurmd
        wants a character device, so it gets one with /dev/null's numbers (1, 3)."""
        if path.exists() or path.is_symlink():
            return
        if self.version < (23, 2):
            path.touch()
            return
        try:
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        except PermissionError as exc:
            raise ClusterError(
                f"Slurm {self.version[0]}.{self.version[1]:02d} needs character devices for "
                f"fake GPUs and mknod {path} was refused (run as root): {exc}"
            ) from exc

    def _start_munge(self) -> None:
        root = self.root
        assert root is not None
        munge = self.sockets_dir() / "munge"
        key = munge / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
            key.chmod(0o600)
        munge.chmod(0o755)  # munged wants the socket dir traversable
        self._spawn(
            "munged",
            [
                self.binary("munged"),
                "--foreground",
                "--force",
                f"--socket={munge}/munge.socket",
                f"--key-file={key}",
                f"--pid-file={munge}/munged.pid",
                f"--log-file={root}/log/munged.log",
                f"--seed-file={munge}/munged.seed",
                "--num-threads=2",
            ],
        )
        deadline = time.monotonic() + 10
        while not (root / "munge" / "munge.socket").exists():
            if self._procs["munged"].poll() is not None or time.monotonic() > deadline:
                raise ClusterError(f"munged did not start; see {root}/log/munged.log")
            time.sleep(0.05)

    def start_slurmctld(self) -> None:
        """Start (or restart after stop_slurmctld) the controller."""
        self._spawn("slurmctld", [self.binary("slurmctld"), "-D", "-f", str(self.conf_path)])

    # ---- accounting (slurmdbd + a private MariaDB) ---------------------------------
    def _write_accounting_files(self) -> None:
        assert self.root is not None
        self.db_port, self.dbd_port = free_ports(2)
        lines = accounting.write_files(
            self.root, self.sockets_dir(), self.db_port, self.dbd_port, self.gpu_qos is not None
        )
        with self.conf_path.open("a") as fh:
            fh.write(lines)

    def _start_accounting(self, timeout: float) -> None:
        """MariaDB, then slurmdbd, then the cluster registered: before slurmctld starts."""
        root = self.root
        assert root is not None
        accounting.install_db(root)
        self._spawn("mariadbd", accounting.mariadb_argv(root, self.db_port, self.sockets_dir()))
        log = root / "log" / "mariadbd.log"
        accounting.wait_port(self.db_port, self._procs["mariadbd"], "mariadbd", log, timeout)
        # slurmdbd reads slurmdbd.conf beside $SLURM_CONF (our etc/)
        self._spawn("slurmdbd", [self.binary("slurmdbd"), "-D"])
        log = root / "log" / "slurmdbd.log"
        accounting.wait_port(self.dbd_port, self._procs["slurmdbd"], "slurmdbd", log, timeout)
        accounting.register(self.env, self.cluster_name, self.binary("sacctmgr"))

    def stop_slurmctld(self) -> None:
        self._terminate("slurmctld")

    def _spawn(self, name: str, argv: list[str]) -> None:
        assert self.root is not None
        out = open(self.root / "log" / f"{name}.stdout", "ab")
        self._procs[name] = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env,
            start_new_session=True,
        )
        out.close()

    def _terminate(self, name: str, timeout: float = 10.0) -> None:
        proc = self._procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def stop(self) -> None:
        """Stop every daemon this object started, by PID; cancel nothing else."""
        if self.root is not None and "slurmctld" in self._procs:
            # cancel jobs first so their batch scripts (children of slurmstepd) end too
            for partition in self.partition_names:
                subprocess.run(
                    ["scancel", "--quiet", "--full", f"--partition={partition}"],
                    env=self.env,
                    capture_output=True,
                    timeout=15,
                    check=False,
                )
            self._wait_no_jobs(10)
        for name in [n for n in self._procs if n.startswith("slurmd-")]:
            self._terminate(name)
        self._terminate("slurmctld")
        self._terminate("slurmdbd")  # after slurmctld: it flushes its last job records
        self._terminate("mariadbd")
        self._terminate("munged")

    def sockets_dir(self) -> Path:
        """Where the unix sockets live (munge/ and slurmd's spool/, where slurmstepd puts
        `<node>_<job>.<step>`): the cluster's root, or a short directory in /tmp linked
        from it when the root is deep, since a unix socket path over 108 bytes fails (a
        long pytest tmp_path made every job launch fail)."""
        assert self.root is not None
        if len(str(self.root)) <= SOCKET_ROOT_MAX:
            return self.root
        if self._short_sockets is None:
            self._short_sockets = Path(tempfile.mkdtemp(prefix="sx-"))
            for sub in ("munge", "spool"):
                link = self.root / sub
                if link.is_symlink():
                    link.unlink()
                link.symlink_to(self._short_sockets / sub, target_is_directory=True)
        return self._short_sockets

    def cleanup(self) -> None:
        self.stop()
        if self._short_sockets is not None:
            shutil.rmtree(self._short_sockets, ignore_errors=True)
        if self._owns_root and self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    # ---- helpers for tests and the demo -----------------------------------------
    def run(self, *argv: str, check: bool = True, timeout: float = 30) -> str:
        """Run a Slurm client command against this cluster; return stdout."""
        res = subprocess.run(
            list(argv), env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and res.returncode != 0:
            raise ClusterError(
                f"{' '.join(argv)} failed ({res.returncode}): {res.stderr.strip() or res.stdout.strip()}"
            )
        return res.stdout

    def sbatch(self, *args: str, wrap: str = "sleep 300") -> int:
        """Submit a job (default: sleep) and return its id."""
        out = self.run("sbatch", "--parsable", f"--chdir={self.root}/jobs", *args, f"--wrap={wrap}")
        return int(out.strip().split(";")[0])

    def wait_idle(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise ClusterError(
                        f"{name} exited with {proc.returncode} during start-up:\n{self._log_tail(name)}"
                    )
            res = subprocess.run(
                ["sinfo", "-h", "-N", "-o", "%N %t"],
                env=self.env,
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
            last = res.stdout + res.stderr
            states = dict(line.split() for line in res.stdout.splitlines() if line.strip())
            if res.returncode == 0 and all(states.get(n) == "idle" for n in self.node_names):
                return
            time.sleep(0.3)
        raise ClusterError(
            f"nodes not idle after {timeout:.0f}s: {last.strip()}; see {self.root}/log/"
        )

    def _log_tail(self, name: str, lines: int = 8) -> str:
        assert self.root is not None
        path = self.root / "log" / f"{name}.stdout"
        text = path.read_text(errors="replace") if path.exists() else "(no output)"
        return "\n".join(text.splitlines()[-lines:])

    def _wait_no_jobs(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            res = subprocess.run(
                ["squeue", "-h", "-t", "PD,R,CG,S", "-o", "%i"],
                env=self.env,
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
            if res.returncode != 0 or not res.stdout.strip():
                return
            time.sleep(0.3)
