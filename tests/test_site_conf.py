"""A site's slurm.conf read into the cluster model (slurm_ext.slurm.site_conf), on two
realistic files (tests/data/site_conf/) and on the lines each rule is about."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_ext.core.model import Partition
from slurm_ext.slurm import site_conf
from slurm_ext.slurm.hostlist import expand_hostlist
from slurm_ext.slurm.site_conf import (
    BackfillParameters,
    SiteConfError,
    parse_site_conf,
    read_site_conf,
)

DATA = Path(__file__).parent / "data" / "site_conf"


def test_heterogeneous_site_two_gpu_types_in_partitions_of_their_own() -> None:
    conf = read_site_conf(DATA / "hetero.conf")
    cluster = conf.cluster
    assert conf.cluster_name == "gpuhub"
    assert conf.files == (str(DATA / "hetero.conf"),)
    # SchedulerParameters continued on the next line; its other options are left alone
    assert conf.backfill == BackfillParameters(
        window_min=2880, interval_s=60, max_job_test=1000, resolution_s=300
    )
    assert len(cluster.nodes) == 16 + 8 + 2
    gpu01 = cluster.node("gpu01")
    assert gpu01 is not None
    assert (gpu01.gpus, gpu01.gpu_type, gpu01.cpus, gpu01.memory_mb) == (4, "a100", 64, 512000)
    assert (gpu01.features, gpu01.weight, gpu01.state) == (("a100", "ib"), 10, "UNKNOWN")
    hgx = cluster.node("hgx008")
    assert hgx is not None
    # Gres with socket affinity; a trailing comment after a continued line
    assert (hgx.gpus, hgx.gpu_type, hgx.cpus, hgx.weight) == (8, "h100", 112, 20)
    assert hgx.features == ("h100", "ib", "nvlink")
    assert hgx.partitions == ("h100", "debug")
    login = cluster.node("login2")  # a lower-case key: keys are case-insensitive
    assert login is not None and (login.gpus, login.state, login.partitions) == (0, "FUTURE", ())
    assert cluster.partitions == (
        Partition("a100", tuple(f"gpu{i:02d}" for i in range(1, 17)), 2 * 86400.0, True, "UP"),
        Partition("h100", tuple(f"hgx{i:03d}" for i in range(1, 9)), 12 * 3600.0, False, "UP"),
        Partition("debug", ("gpu15", "gpu16", "hgx008"), 1800.0, False, "UP"),
    )
    assert cluster.default_partition == cluster.partition("a100")
    assert cluster.gpu_types("debug") == ("a100", "h100")
    assert cluster.gpu_types("h100") == ("h100",)


def test_defaults_and_includes() -> None:
    conf = read_site_conf(DATA / "defaults.conf")
    cluster = conf.cluster
    assert conf.files == (
        str(DATA / "defaults.conf"),
        str(DATA / "nodes.conf"),
        str(DATA / "include" / "campus-partitions.conf"),  # `%c` is the ClusterName
    )
    assert conf.backfill == BackfillParameters(window_min=4320, interval_s=45)
    by = {n.name: n for n in cluster.nodes}
    assert len(by) == 10 + 8 + 4
    # CPUs from sockets x cores x threads, when no CPUs= is given
    rtx1, rtx7, v100, cpu = by["rtx1"], by["rtx7"], by["v100-03"], by["cpu10"]
    assert (rtx1.cpus, rtx1.gpus, rtx1.gpu_type, rtx1.features) == (96, 8, "rtx8000", ("rtx",))
    assert (rtx1.memory_mb, rtx1.weight, rtx1.state) == (384000, 1, "UNKNOWN")
    # a line's own values win over the defaults
    assert (rtx7.memory_mb, rtx7.weight, rtx7.features) == (768000, 50, ("rtx", "bigmem"))
    # a later DEFAULT line changes what it names and keeps the rest
    assert (v100.cpus, v100.gpus, v100.gpu_type, v100.features) == (80, 4, "v100", ("v100",))
    assert (v100.memory_mb, v100.weight) == (384000, 5)
    # nodes defined before the GPU defaults have none of them
    assert (cpu.cpus, cpu.gpus, cpu.gpu_type, cpu.features) == (128, 0, None, ())
    parts = {p.name: p for p in cluster.partitions}
    # PartitionName=DEFAULT's MaxTime and State, unless the line says otherwise
    assert parts["gpu"].max_time_s == 86400 and parts["gpu"].default
    assert parts["long"].max_time_s == 7 * 86400 and parts["long"].nodes == ("rtx7", "rtx8")
    assert parts["cpu"].max_time_s is None
    assert parts["all"].nodes == tuple(by) and parts["all"].state == "DOWN"
    assert rtx7.partitions == ("gpu", "long", "all")
    assert cluster.gpu_types("gpu") == ("rtx8000", "v100")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 1800.0),
        ("30:30", 1860.0),  # seconds round up to the next minute, as Slurm's MaxTime
        ("12:00:00", 43200.0),
        ("1-12", 1.5 * 86400),
        ("2-00:30", 2 * 86400 + 1800.0),
        ("3-00:00:00", 3 * 86400.0),
        ("UNLIMITED", None),
        ("infinite", None),
        ("-1", None),
    ],
)
def test_max_time_forms(text: str, seconds: float | None) -> None:
    conf = parse_site_conf(f"NodeName=n1\nPartitionName=p Nodes=n1 MaxTime={text}\n")
    assert conf.cluster.partitions[0].max_time_s == seconds


def test_partition_without_max_time_is_unlimited_and_up() -> None:
    conf = parse_site_conf("NodeName=n[1-2]\nPartitionName=p Nodes=n[1-2]\n")
    assert conf.cluster.partitions == (Partition("p", ("n1", "n2"), None, False, "UP"),)
    assert conf.cluster.default_partition is None
    assert conf.backfill == BackfillParameters()  # Slurm's own defaults


def test_comments_escapes_quotes_and_continuations() -> None:
    text = (
        "# a comment line\n"
        "   \n"
        "NODENAME=n1 Gres=gpu:a100:2 \\\n"
        '   Features="a100,ib" # the rest of the line is a comment\n'
        "NodeName=n2 Features=x\\#y\n"  # an escaped # is part of the value
        "partitionname=p nodes=n[1-2] default=yes maxtime=60 state=up\n"
    )
    cluster = parse_site_conf(text).cluster
    assert [(n.name, n.gpus, n.features) for n in cluster.nodes] == [
        ("n1", 2, ("a100", "ib")),
        ("n2", 0, ("x#y",)),
    ]
    assert cluster.partitions == (Partition("p", ("n1", "n2"), 3600.0, True, "UP"),)


def test_the_last_default_partition_wins_as_in_slurm() -> None:
    conf = parse_site_conf(
        "NodeName=n1\nPartitionName=a Nodes=n1 Default=YES\nPartitionName=b Nodes=n1 Default=YES\n"
    )
    assert conf.cluster.default_partition == conf.cluster.partition("b")


def test_partition_nodes_keep_node_table_order() -> None:
    conf = parse_site_conf("NodeName=b1\nNodeName=a1\nPartitionName=p Nodes=a1,b1\n")
    assert conf.cluster.partitions[0].nodes == ("b1", "a1")


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("NodeName=n1\nNodeName=n[1-2]\n", 2, "node n1 defined twice"),
        ("NodeName=n[3-1]\n", 1, "reversed range"),
        ("NodeName=n1 Gres=gpu:a100:x\n", 1, "Gres"),
        ("NodeName=n1 CPUs=many\n", 1, "CPUs='many': not a whole number"),
        ("NodeName=n1\nPartitionName=p Nodes=n[1-3]\n", 2, "n2, n3"),
        ("NodeName=n1\nPartitionName=p Nodes=n1 MaxTime=soon\n", 2, "MaxTime"),
        ("NodeName=n1\nPartitionName=p Nodes=n1 State=OPEN\n", 2, "State=OPEN"),
        ("NodeName=n1\nPartitionName=p Nodes=n1 Default=maybe\n", 2, "Default='maybe'"),
        ("NodeName=n1\nPartitionName=p Nodes=n1\nPartitionName=p\n", 3, "defined twice"),
        ("SchedulerParameters=bf_window=two_days\n", 1, "bf_window='two_days'"),
        ("SchedulerParameters=bf_interval=0\n", 1, "bf_interval='0'"),
        ("ClusterName=c\nthis is not a setting\n", 2, "expected Key=Value"),
        ("NodeName=n1 Weight+=2\n", 1, "operator +="),
        ("Include missing.conf\n", 1, "cannot read"),
        ("Include %c.conf\n", 1, "%c before any ClusterName"),
        ("Include *.conf\n", 1, "globs"),
    ],
)
def test_bad_input_names_the_file_the_line_and_the_fault(
    tmp_path: Path, text: str, line: int, words: str
) -> None:
    path = tmp_path / "slurm.conf"
    path.write_text(text)
    with pytest.raises(SiteConfError) as info:
        read_site_conf(path)
    message = str(info.value)
    assert message.startswith(f"{path}:{line}: "), message
    assert words in message
    assert isinstance(info.value, ValueError) and info.value.line == line


def test_include_cycle_stops_at_the_depth_bound(tmp_path: Path) -> None:
    (tmp_path / "slurm.conf").write_text("NodeName=n1\nInclude a.conf\n")
    (tmp_path / "a.conf").write_text("# a includes b\nInclude b.conf\n")
    (tmp_path / "b.conf").write_text("Include a.conf\n")
    with pytest.raises(SiteConfError, match="nested deeper than") as info:
        read_site_conf(tmp_path / "slurm.conf")
    assert info.value.path in (str(tmp_path / "a.conf"), str(tmp_path / "b.conf"))


def test_nested_includes_resolve_from_the_top_files_directory(tmp_path: Path) -> None:
    """As Slurm (get_extra_conf_path): a relative name is looked up beside slurm.conf,
    whichever file includes it."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "slurm.conf").write_text("Include sub/nodes.conf\n")
    (tmp_path / "sub" / "nodes.conf").write_text("NodeName=n1\nInclude parts.conf\n")
    (tmp_path / "parts.conf").write_text("PartitionName=p Nodes=n1 Default=YES\n")
    conf = read_site_conf(tmp_path / "slurm.conf")
    assert conf.cluster.partitions == (Partition("p", ("n1",), None, True, "UP"),)
    assert conf.files[-1] == str(tmp_path / "parts.conf")


def test_input_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = tmp_path / "big.conf"
    big.write_text("#" * (site_conf.MAX_FILE_BYTES + 1))
    with pytest.raises(SiteConfError, match="larger than"):
        read_site_conf(big)
    # a range that would pass the node bound is refused before its nodes exist
    with pytest.raises(SiteConfError, match="more than 100000 nodes") as info:
        parse_site_conf("NodeName=a[1-60000]\nNodeName=b[1-60000]\n")
    assert info.value.line == 2
    # one line's hostlist stops expanding at the bound, whatever its ranges
    with pytest.raises(SiteConfError, match="names more than 100000 hosts"):
        parse_site_conf("NodeName=a[1-60000],b[1-60000]\n")
    with pytest.raises(ValueError, match="names more than 3 hosts"):
        expand_hostlist("n[1-2],m[1-2]", limit=3)
    assert expand_hostlist("n[1-2],m1", limit=3) == ["n1", "n2", "m1"]
    monkeypatch.setattr(site_conf, "MAX_MEMBERSHIPS", 5)
    with pytest.raises(SiteConfError, match="memberships"):
        parse_site_conf("NodeName=n[1-3]\nPartitionName=a Nodes=ALL\nPartitionName=b Nodes=ALL\n")


def test_logical_lines_join_continuations_as_slurm_does() -> None:
    """parse_config.c joins a continued line with the next as is (no blank added), and
    an even number of trailing backslashes is no continuation."""
    text = "A=1 \\\nB=2\nC=x\\\\\nD=4\\\n"
    assert list(site_conf.logical_lines(text)) == [(1, "A=1 B=2"), (3, "C=x\\"), (4, "D=4")]
