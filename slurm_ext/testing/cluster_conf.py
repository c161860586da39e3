"""The local cluster's slurm.conf and gres.conf (`LocalCluster`, testing/cluster.py):
the templates and their rendering, apart from the daemons that read them.

Two shapes: homogeneous (`nodes` x `gpus_per_node` untyped GPUs, node1..N, one partition)
and heterogeneous (`node_groups`: each `NodeGroup` its own nodes NAME-1..N with typed
GPUs, and its own partition NAME with its own MaxTime).

Fast scheduler cycles (sched and bf intervals 2 s, PriorityCalcPeriod 1 min) keep Slurm's
own latency small next to test timescales; priority/multifactor with the job-size,
fair-share, partition and QOS weights at 0, so a test sets the factors it needs through
`extra_conf` (a replay's own settings: replay/slurmconf.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from slurm_ext.slurm.hostlist import compress_hostlist


@dataclass(frozen=True)
class NodeGroup:
    """`count` alike nodes, NAME-1 .. NAME-count, and their partition NAME: a GPU type of
    a heterogeneous LocalCluster (e.g. NodeGroup("h100", count=2, gpus=8, gpu_type="h100"))."""

    name: str
    count: int = 1
    gpus: int = 4
    gpu_type: str | None = None  # None: untyped GPUs (gres gpu:N)
    cpus: int = 16
    memory_mb: int = 64000
    features: tuple[str, ...] = ()
    weight: int = 1
    max_time: str = "INFINITE"  # the partition's MaxTime, as slurm.conf spells it

    def __post_init__(self) -> None:
        if self.count < 1 or self.gpus < 1:
            raise ValueError(f"node group {self.name}: count and gpus must be >= 1")

    @property
    def node_names(self) -> list[str]:
        return [f"{self.name}-{i}" for i in range(1, self.count + 1)]

    @property
    def gres(self) -> str:
        return f"gpu:{self.gpu_type}:{self.gpus}" if self.gpu_type else f"gpu:{self.gpus}"


class ClusterShape(Protocol):
    """What the configuration files need of a cluster (`LocalCluster` has it)."""

    cluster_name: str
    root: Path
    nodes: int
    node_names: Sequence[str]
    cpus_per_node: int
    memory_mb: int
    gpus_per_node: int
    shards_per_gpu: int
    partition: str
    share_partition: str
    extra_conf: str
    node_groups: Sequence[NodeGroup]


SLURM_CONF = """\
ClusterName={cluster_name}
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
SlurmdPort={first_slurmd_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sockets}/munge/munge.socket,cred_expire=5
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={sockets}/spool/slurmd-%n
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
PriorityType=priority/multifactor
PriorityWeightJobSize=0
PriorityWeightFairshare=0
PriorityWeightPartition=0
PriorityWeightQOS=0
PriorityCalcPeriod=1
GresTypes={gres_types}
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=600
KillWait=2
MessageTimeout=5
InactiveLimit=0
MpiDefault=none
MailProg=/bin/true
JobRequeue=1
DefMemPerCPU=1000
{job_submit}
{extra}
{nodes_and_partitions}"""

HOMOGENEOUS_NODES = """\
NodeName=DEFAULT CPUs={cpus} RealMemory={memory_mb} Gres={node_gres} State=UNKNOWN
{node_lines}
PartitionName={partition} Nodes={node_range} Default=YES MaxTime=INFINITE State=UP
{share_partition}"""

# A node group's node: everything on its own line (a NodeName=DEFAULT line would hand
# its Features on to the next group's nodes)
GROUP_NODE = (
    "CPUs={cpus} RealMemory={memory_mb} Gres={gres}{features} Weight={weight} State=UNKNOWN"
)

GRES_CONF = """\
AutoDetect=off
NodeName={node_range} Name=gpu File={root}/dev/gpu[0-{last_gpu}]
"""

# With `shards_per_gpu` (see LocalCluster): Slurm never puts a gres/shard job on a GPU a
# gres/gpu job holds, so each GPU gets a second, "share" device file that only carries
# shards; whole-GPU jobs ask for type "full". GPU i and share device G+i are one GPU.
SHARD_GRES_CONF = """\
AutoDetect=off
NodeName={node_range} Name=gpu Type=full File={root}/dev/gpu[0-{last_gpu}]
NodeName={node_range} Name=gpu Type=share File={root}/dev/gpu[{first_share}-{last_share}]
NodeName={node_range} Name=shard Count={shards} File={root}/dev/gpu[{first_share}-{last_share}]
"""


def node_range(nodes: int) -> str:
    """The cluster's nodes as one Slurm hostlist: node[1-N] (node1 alone)."""
    return f"node[1-{nodes}]" if nodes > 1 else "node1"


def node_gres(gpus_per_node: int, shards_per_gpu: int) -> str:
    """Each node's Gres= line: whole GPUs, or full/share GPUs and shards."""
    g, s = gpus_per_node, shards_per_gpu
    return f"gpu:full:{g},gpu:share:{g},shard:{g * (s - 1)}" if s > 0 else f"gpu:{g}"


def node_line(name: str, port: int, attributes: str = "") -> str:
    """One slurmd of the cluster: its name, loopback port and, for a group, its hardware."""
    return f"NodeName={name} NodeHostname=localhost Port={port}" + (
        f" {attributes}" if attributes else ""
    )


def homogeneous_nodes(c: ClusterShape, node_ports: Sequence[int]) -> str:
    """The NodeName and PartitionName lines of `nodes` alike nodes in one partition."""
    nodes = node_range(c.nodes)
    return HOMOGENEOUS_NODES.format(
        cpus=c.cpus_per_node,
        memory_mb=c.memory_mb,
        node_gres=node_gres(c.gpus_per_node, c.shards_per_gpu),
        node_lines="\n".join(node_line(n, p) for n, p in zip(c.node_names, node_ports)),
        node_range=nodes,
        partition=c.partition,
        share_partition=(
            f"PartitionName={c.share_partition} Nodes={nodes} MaxTime=INFINITE State=UP\n"
            if c.shards_per_gpu > 0
            else ""
        ),
    )


def group_nodes(groups: Sequence[NodeGroup], node_ports: Sequence[int]) -> str:
    """The NodeName lines of every group, then a partition per group (the first the
    default)."""
    lines, ports = [], iter(node_ports)
    for g in groups:
        features = f" Features={','.join(g.features)}" if g.features else ""
        attributes = GROUP_NODE.format(
            cpus=g.cpus, memory_mb=g.memory_mb, gres=g.gres, features=features, weight=g.weight
        )
        lines.extend(node_line(n, next(ports), attributes) for n in g.node_names)
    for i, g in enumerate(groups):
        default = " Default=YES" if i == 0 else ""
        lines.append(
            f"PartitionName={g.name} Nodes={compress_hostlist(g.node_names)}{default} "
            f"MaxTime={g.max_time} State=UP"
        )
    return "\n".join(lines) + "\n"


def slurm_conf_text(
    c: ClusterShape, ctld_port: int, node_ports: Sequence[int], sockets: Path, job_submit: str
) -> str:
    """slurm.conf for `c`, its slurmctld and each slurmd on the given loopback ports."""
    if c.node_groups and c.shards_per_gpu > 0:
        raise ValueError("node groups and shards_per_gpu do not go together")
    return SLURM_CONF.format(
        cluster_name=c.cluster_name,
        ctld_port=ctld_port,
        first_slurmd_port=node_ports[0],
        root=c.root,
        sockets=sockets,
        gres_types="gpu,shard" if c.shards_per_gpu > 0 else "gpu",
        job_submit=job_submit,
        extra=c.extra_conf,
        nodes_and_partitions=(
            group_nodes(c.node_groups, node_ports)
            if c.node_groups
            else homogeneous_nodes(c, node_ports)
        ),
    )


def gres_conf_text(c: ClusterShape) -> str:
    """gres.conf for `c`: its fake GPU device files (and share devices with shards; typed
    per group with node groups)."""
    if c.node_groups:
        lines = ["AutoDetect=off"]
        for grp in c.node_groups:
            kind = f" Type={grp.gpu_type}" if grp.gpu_type else ""
            lines.append(
                f"NodeName={compress_hostlist(grp.node_names)} Name=gpu{kind} "
                f"File={c.root}/dev/gpu[0-{grp.gpus - 1}]"
            )
        return "\n".join(lines) + "\n"
    g, nodes = c.gpus_per_node, node_range(c.nodes)
    if c.shards_per_gpu > 0:
        return SHARD_GRES_CONF.format(
            node_range=nodes,
            root=c.root,
            last_gpu=g - 1,
            first_share=g,
            last_share=2 * g - 1,
            shards=g * (c.shards_per_gpu - 1),
        )
    return GRES_CONF.format(node_range=nodes, root=c.root, last_gpu=g - 1)
