"""A site's slurm.conf read into the cluster model: its nodes, partitions and backfill
settings, as Slurm's own parser (src/common/parse_config.c, read_config.c) reads them.

What is read: `NodeName` lines (hostlist ranges, `NodeName=DEFAULT` lines, whose values
accumulate and fill what a later line leaves out; `Gres=gpu[:TYPE]:N`, `Features` or
`Feature`, `CPUs` or `Procs` (else sockets x cores x threads), `RealMemory`, `Weight`,
`State`), `PartitionName` lines (`Nodes` as a hostlist or `ALL`, `MaxTime` in Slurm's time
forms or INFINITE/UNLIMITED, `Default`, `State`; `PartitionName=DEFAULT`), `ClusterName`
and the backfill part of `SchedulerParameters`. Everything else is left alone.

As Slurm: keys are case-insensitive, names are not; `#` starts a comment unless escaped
(`\\#`); a line ending in an odd number of backslashes continues on the next (joined as
is); `\\x` stands for `x`; values may be double-quoted; `Include FILE` reads FILE in place,
a relative FILE from the directory of the top slurm.conf (not of the including file), `%c`
in it standing for ClusterName. Unlike Slurm, a NodeSet is not read: a partition naming
one is an error, as is any other name no NodeName line defines.

Bad input raises `SiteConfError` (a ValueError) naming the file, the line and what is
wrong. Input is bounded: MAX_FILE_BYTES a file, MAX_INCLUDE_DEPTH nested includes (a
cycle ends there), MAX_NODES nodes in all and MAX_MEMBERSHIPS partition memberships.

Not to be confused with `replay/slurmconf.py`, which writes the settings of a replay's
own cluster.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from slurm_ext.core.model import Cluster, Node, Partition
from slurm_ext.slurm.gres import parse_gpus
from slurm_ext.slurm.hostlist import expand_hostlist
from slurm_ext.slurm.sacct import slurm_time_s

MAX_FILE_BYTES = 4 << 20  # a slurm.conf of 100,000 one-line nodes is ~6 MB; one file
MAX_INCLUDE_DEPTH = 8
MAX_NODES = 100_000
MAX_MEMBERSHIPS = 4_000_000  # node-in-partition pairs (e.g. 100,000 nodes x 40 partitions)

# parse_config.c's keyvalue_pattern: a key, an optional operator, "=", a value (quoted
# with whitespace, or unquoted without)
_PAIR = re.compile(r'\s*([A-Za-z0-9_.]+)\s*([-*+/]?)=\s*(?:"([^"]*)"|(\S+))(?=\s|$)')
_INCLUDE = re.compile(r"include\s+(\S+)\s*$", re.IGNORECASE)
_STATES = ("UP", "DOWN", "DRAIN", "INACTIVE")
_TRUE, _FALSE = ("yes", "up", "true", "1"), ("no", "down", "false", "0")


class SiteConfError(ValueError):
    """slurm.conf could not be read; the message names the file, the line and why."""

    def __init__(self, path: str | Path, line: int, message: str) -> None:
        self.path, self.line = str(path), line
        where = f"{path}:{line}" if line else str(path)
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True)
class BackfillParameters:
    """sched/backfill's settings from SchedulerParameters (Slurm's defaults where unset)."""

    window_min: int = 1440  # bf_window: how far ahead backfill plans, minutes
    interval_s: int = 30  # bf_interval: seconds between backfill passes
    max_job_test: int = 500  # bf_max_job_test: jobs one pass considers
    resolution_s: int = 60  # bf_resolution: the plan's time step, seconds


_BACKFILL_KEYS = {
    "bf_window": "window_min",
    "bf_interval": "interval_s",
    "bf_max_job_test": "max_job_test",
    "bf_resolution": "resolution_s",
}


@dataclass(frozen=True)
class SiteConf:
    """What slurm_ext reads of a site's slurm.conf."""

    cluster: Cluster
    backfill: BackfillParameters = BackfillParameters()
    cluster_name: str = ""
    files: tuple[str, ...] = ()  # the files read: the top one first, then its includes


@dataclass(frozen=True)
class _Line:
    """One logical line's key=value pairs (keys lower-cased), and where it is."""

    path: str
    number: int
    pairs: tuple[tuple[str, str], ...]

    def error(self, message: str) -> SiteConfError:
        return SiteConfError(self.path, self.number, message)

    def get(self, *keys: str) -> str | None:
        """The value of the first of `keys` (lower case) the line sets; None if none."""
        values = dict(self.pairs)
        return next((values[k] for k in keys if k in values), None)


def logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(first line number, text) of each logical line: comments cut, continued lines
    joined, escapes resolved, as parse_config.c's _get_next_line."""
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = _strip_comment(raw)
        stripped = line.rstrip()
        trailing = len(stripped) - len(stripped.rstrip("\\"))
        if not pending:
            start = number
        if trailing % 2 == 1:
            pending += stripped[:-1]
            continue
        yield start, _unescape(pending + line)
        pending = ""
    if pending:
        yield start, _unescape(pending)


def _strip_comment(line: str) -> str:
    """The line up to its first `#` not escaped by an odd number of backslashes."""
    backslashes = 0
    for i, ch in enumerate(line):
        if ch == "#" and backslashes % 2 == 0:
            return line[:i]
        backslashes = backslashes + 1 if ch == "\\" else 0
    return line


def _unescape(line: str) -> str:
    return re.sub(r"\\(.)", r"\1", line)


def split_pairs(text: str, path: str, number: int) -> tuple[tuple[str, str], ...]:
    """The key=value pairs of one logical line, keys lower-cased; SiteConfError on
    anything else."""
    pairs, pos, rest = [], 0, text.rstrip()
    while pos < len(rest):
        m = _PAIR.match(rest, pos)
        if m is None:
            bad = rest[pos:].strip()[:60]
            raise SiteConfError(path, number, f"expected Key=Value, found {bad!r}")
        if m.group(2):
            raise SiteConfError(path, number, f"operator {m.group(2)}= is not read here")
        value = m.group(3) if m.group(3) is not None else m.group(4)
        pairs.append((m.group(1).lower(), value))
        pos = m.end()
    return tuple(pairs)


@dataclass
class _Reader:
    """The state of one read: defaults so far, nodes and partitions in file order."""

    top: Path
    node_defaults: dict[str, str] = field(default_factory=dict)
    part_defaults: dict[str, str] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)
    partitions: dict[str, tuple[_Line, dict[str, str]]] = field(default_factory=dict)
    settings: dict[str, tuple[str, _Line]] = field(default_factory=dict)  # global keys
    files: list[str] = field(default_factory=list)

    def read_file(self, path: Path, depth: int, line: _Line | None = None) -> None:
        where = (line.path, line.number) if line else (str(path), 0)
        try:
            with path.open("rb") as fh:
                data = fh.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise SiteConfError(*where, f"cannot read {path}: {exc.strerror or exc}") from exc
        if len(data) > MAX_FILE_BYTES:
            raise SiteConfError(path, 0, f"larger than {MAX_FILE_BYTES} bytes")
        self.files.append(str(path))
        self.read_text(data.decode("utf-8", errors="replace"), str(path), depth)

    def read_text(self, text: str, path: str, depth: int) -> None:
        for number, content in logical_lines(text):
            if not content.strip():
                continue
            include = _INCLUDE.match(content.strip())
            if include:
                self.include(include.group(1), _Line(path, number, ()), depth)
                continue
            self.take(_Line(path, number, split_pairs(content, path, number)))

    def include(self, name: str, line: _Line, depth: int) -> None:
        if depth >= MAX_INCLUDE_DEPTH:
            raise line.error(f"Include nested deeper than {MAX_INCLUDE_DEPTH} (a cycle?)")
        if "%c" in name:
            if "clustername" not in self.settings:
                raise line.error(f"Include {name}: %c before any ClusterName")
            name = name.replace("%c", self.settings["clustername"][0])
        if "*" in name:
            raise line.error(f"Include {name}: Slurm does not read globs")
        path = Path(name) if name.startswith("/") else self.top.parent / name
        self.read_file(path, depth + 1, line)

    def take(self, line: _Line) -> None:
        kind, value = line.pairs[0]
        if kind == "nodename":
            self.node_line(line, value)
        elif kind == "partitionname":
            self.partition_line(line, value)
        elif kind not in ("nodeset", "downnodes", "frontendname"):
            self.settings.update((k, (v, line)) for k, v in line.pairs)  # the last one wins

    def node_line(self, line: _Line, names: str) -> None:
        opts = dict(line.pairs[1:])
        if names.upper() == "DEFAULT":
            self.node_defaults.update(opts)
            return
        try:
            expanded = expand_hostlist(names, limit=MAX_NODES)
        except ValueError as exc:
            raise line.error(f"NodeName: {exc}") from None
        if len(self.nodes) + len(expanded) > MAX_NODES:
            raise line.error(f"more than {MAX_NODES} nodes")
        merged = _Line(line.path, line.number, tuple({**self.node_defaults, **opts}.items()))
        template = node_from_options(merged)
        for name in expanded:
            if name in self.nodes:
                raise line.error(f"node {name} defined twice")
            self.nodes[name] = replace(template, name=name)

    def partition_line(self, line: _Line, name: str) -> None:
        opts = dict(line.pairs[1:])
        if name.upper() == "DEFAULT":
            self.part_defaults.update(opts)
            return
        if name in self.partitions:
            raise line.error(f"partition {name} defined twice")
        self.partitions[name] = (line, {**self.part_defaults, **opts})

    def cluster(self) -> Cluster:
        parts, members = [], 0
        for line, opts in self.partitions.values():
            part = partition_from_options(line, opts, list(self.nodes))
            members += len(part.nodes)
            if members > MAX_MEMBERSHIPS:
                raise line.error(f"more than {MAX_MEMBERSHIPS} node-partition memberships")
            parts.append(part)
        of: dict[str, list[str]] = {}
        for part in parts:
            for name in part.nodes:
                of.setdefault(name, []).append(part.name)
        nodes = tuple(replace(n, partitions=tuple(of.get(n.name, ()))) for n in self.nodes.values())
        return Cluster(nodes=nodes, partitions=tuple(parts))

    def backfill(self) -> BackfillParameters:
        if "schedulerparameters" not in self.settings:
            return BackfillParameters()
        text, line = self.settings["schedulerparameters"]
        values: dict[str, int] = {}
        for item in filter(None, (i.strip() for i in text.split(","))):
            key, _, value = item.partition("=")
            if key.lower() in _BACKFILL_KEYS:
                if not value.isdigit() or int(value) < 1:
                    raise line.error(f"SchedulerParameters {key}={value!r}: not a count >= 1")
                values[_BACKFILL_KEYS[key.lower()]] = int(value)
        return BackfillParameters(**values)


def _count(line: _Line, key: str, default: int, *aliases: str) -> int:
    """The whole number `key` (or an alias; Slurm's spelling, for the error) is set to."""
    value = line.get(*(k.lower() for k in (key, *aliases)))
    if value is None:
        return default
    if not value.isdigit():
        raise line.error(f"{key}={value!r}: not a whole number")
    return int(value)


def node_from_options(line: _Line) -> Node:
    """A node's description (no name yet) from its line merged with the defaults."""
    try:
        gpus, gpu_type = parse_gpus(line.get("gres"))
    except ValueError as exc:
        raise line.error(f"Gres: {exc}") from None
    cpus = _count(line, "CPUs", 0, "Procs")
    if not cpus:
        threads = _count(line, "ThreadsPerCore", 1) * _count(line, "CoresPerSocket", 1)
        per_board = line.get("socketsperboard")
        sockets = (
            _count(line, "Boards", 1) * _count(line, "SocketsPerBoard", 1)
            if per_board is not None
            else _count(line, "Sockets", _count(line, "Boards", 1))
        )
        cpus = max(1, sockets * threads)
    features = line.get("features", "feature") or ""
    return Node(
        name="",
        state=(line.get("state") or "UNKNOWN").upper(),
        cpus=cpus,
        gpus=gpus,
        gpu_type=gpu_type,
        features=tuple(f for f in features.split(",") if f),
        memory_mb=_count(line, "RealMemory", 1),
        weight=_count(line, "Weight", 1),
    )


def partition_from_options(line: _Line, opts: dict[str, str], known: list[str]) -> Partition:
    """One partition from its line merged with the defaults; `known`: every node name."""
    own = _Line(line.path, line.number, tuple(opts.items()))
    name = line.pairs[0][1]
    spec = own.get("nodes") or ""
    if spec.upper() == "ALL":
        nodes = list(known)
    else:
        try:
            listed = set(expand_hostlist(spec, limit=MAX_NODES))
        except ValueError as exc:
            raise line.error(f"partition {name} Nodes: {exc}") from None
        unknown = sorted(listed.difference(known))
        if unknown:
            raise line.error(
                f"partition {name} names nodes no NodeName line defines: "
                f"{', '.join(unknown[:5])} (NodeSet lines are not read)"
            )
        nodes = [n for n in known if n in listed]  # Slurm keeps node-table order
    max_time = (own.get("maxtime") or "UNLIMITED").upper()
    try:
        seconds = None if max_time == "-1" else slurm_time_s(max_time, "MaxTime")
    except ValueError as exc:
        raise line.error(f"partition {name}: {exc}") from None
    state = (own.get("state") or "UP").upper()
    if state not in _STATES:
        raise line.error(f"partition {name} State={state}: not one of {', '.join(_STATES)}")
    return Partition(
        name=name,
        nodes=tuple(nodes),
        # MaxTime's resolution is a minute, seconds rounded up (slurm.conf(5))
        max_time_s=None if seconds is None else -(-seconds // 60) * 60,
        default=_flag(own, "Default", name),
        state=state,
    )


def _flag(line: _Line, key: str, name: str) -> bool:
    value = (line.get(key.lower()) or "no").lower()
    if value not in _TRUE + _FALSE:
        raise line.error(f"partition {name} {key}={value!r}: not YES or NO")
    return value in _TRUE


def read_site_conf(path: str | Path) -> SiteConf:
    """Read slurm.conf at `path` (and what it includes) into the model."""
    reader = _Reader(top=Path(path))
    reader.read_file(Path(path), 0)
    return _result(reader)


def parse_site_conf(text: str, path: str | Path = "slurm.conf") -> SiteConf:
    """`read_site_conf` for text in hand; `path` names it in errors and places includes."""
    if len(text.encode()) > MAX_FILE_BYTES:
        raise SiteConfError(path, 0, f"larger than {MAX_FILE_BYTES} bytes")
    reader = _Reader(top=Path(path), files=[str(path)])
    reader.read_text(text, str(path), 0)
    return _result(reader)


def _result(reader: _Reader) -> SiteConf:
    return SiteConf(
        cluster=reader.cluster(),
        backfill=reader.backfill(),
        cluster_name=reader.settings.get("clustername", ("", None))[0],
        files=tuple(reader.files),
    )
