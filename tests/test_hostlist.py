"""Hostlist expressions from Slurm's own documentation, expanded and compressed by
slurm_ext.slurm.hostlist, and (where installed) checked against scontrol itself.

Sources, all in the Slurm 25.11.2 source tarball (slurm-25.11.2/...):
  H   src/common/hostlist.h, the comment above hostlist_create() and MAX_PREFIX_CNT
  SC  doc/man/man5/slurm.conf.5, NODE CONFIGURATION (NodeName) and the example file
  SCT doc/man/man1/scontrol.1 (hostlist, hostlistsorted, hostnames, the EXAMPLES)
  SI  doc/man/man1/sinfo.1 (--nodes, the EXAMPLES' output)
  SR  doc/man/man1/srun.1 (the EXAMPLES' output)
  T   doc/man/man5/topology.conf.5 (Nodes=, Switches=)
  IT  testsuite/slurm_unit/common/hostlist/hostlist_iterator-test.c
  P   contribs/perlapi/libslurm/perl/t/21-hostlist.t
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from slurm_ext.slurm.hostlist import MAX_RANGE, compress_hostlist, expand_hostlist
from slurm_ext.testing.cluster import slurm2511_prefix


def names(prefix: str, numbers, width: int = 0, suffix: str = "") -> list[str]:
    return [f"{prefix}{i:0{width}d}{suffix}" for i in numbers]


# (expression, its expansion, source)
DOCUMENTED = [
    ("alpha,beta,gamma", ["alpha", "beta", "gamma"], "H, SC"),
    ("alpha beta gamma", ["alpha", "beta", "gamma"], "H: separated by ',' or whitespace"),
    ("tux[0-5,12,20-25]", names("tux", [*range(6), 12, *range(20, 26)]), "H"),
    ("linux[0000-1023]", names("linux", range(1024), 4), "H, SC"),
    ("linux[0-64,128]", names("linux", [*range(65), 128]), "SC"),
    ("lx[15,18,32-33]", names("lx", [15, 18, 32, 33]), "SC"),
    (
        "rack[0-63]_blade[0-41]",
        [f"rack{r}_blade{b}" for r in range(64) for b in range(42)],
        "SC: several numeric ranges",
    ),
    ("dev[0-25]", names("dev", range(26)), "SC: example slurm.conf"),
    ("dev[0-8,18-25]", names("dev", [*range(9), *range(18, 26)]), "SC: example slurm.conf"),
    ("lx[10-20]", names("lx", range(10, 21)), "SCT"),
    ("tux[1-3]", ["tux1", "tux2", "tux3"], "SCT: show hostnames tux[1-3]"),
    ("tux[2,1-2]", ["tux2", "tux1", "tux2"], "SCT: hostlist of tux2,tux1,tux2"),
    ("tux[1-2,2]", ["tux1", "tux2", "tux2"], "SCT: hostlistsorted of tux2,tux1,tux2"),
    ("snowflake[0-48]", names("snowflake", range(49)), "SCT: show partition"),
    ("linux[00-17]", names("linux", range(18), 2), "SI: --nodes"),
    ("adev[2,4-7]", names("adev", [2, 4, 5, 6, 7]), "SI: EXAMPLES"),
    ("adev[10-15]", names("adev", range(10, 16)), "SI: EXAMPLES"),
    ("dev[0,5]", ["dev0", "dev5"], "SI: EXAMPLES"),
    ("node[01-02]", ["node01", "node02"], "SR: EXAMPLES"),
    ("dev[7-10]", names("dev", range(7, 11)), "SR: EXAMPLES"),
    ("tux[0-3,12,18-20]", names("tux", [0, 1, 2, 3, 12, 18, 19, 20]), "T"),
    ("s[0-2,4-8,12]", names("s", [0, 1, 2, 4, 5, 6, 7, 8, 12]), "T"),
    ("b[1-3],c1,d[1-5],e1", [*names("b", [1, 2, 3]), "c1", *names("d", range(1, 6)), "e1"], "IT"),
    (
        "node[0,3-4,8],linux,linux[2,5],node[4,12,15],linux[8,23]",
        [*names("node", [0, 3, 4, 8]), "linux", *names("linux", [2, 5])]
        + [*names("node", [4, 12, 15]), *names("linux", [8, 23])],
        "P: ranged string",
    ),
]

# Refused by Slurm (scontrol show hostnames: "Invalid range" / "Invalid hostlist") and here.
REFUSED = [
    ("a[3-1]", "reversed range"),
    ("x[]", "bad hostlist part"),
    ("x[a]", "bad range"),
    # H: MAX_PREFIX_CNT's comment names this as the expression that would exhaust memory
    ("a[0-999999999].b[0-9]", f"names more than {MAX_RANGE} hosts"),
]


@pytest.mark.parametrize("expr, expected, source", DOCUMENTED, ids=[d[0][:40] for d in DOCUMENTED])
def test_documented_expressions_expand_as_slurm_documents(expr, expected, source) -> None:
    assert expand_hostlist(expr) == expected, source


@pytest.mark.parametrize("expr, expected, source", DOCUMENTED, ids=[d[0][:40] for d in DOCUMENTED])
def test_compressed_form_expands_back_to_the_same_sorted_set(expr, expected, source) -> None:
    assert sorted(expand_hostlist(compress_hostlist(expected))) == sorted(set(expected))


@pytest.mark.parametrize(
    "names_, documented",
    [
        (["tux2", "tux1", "tux2"], "tux[1-2]"),  # SCT's example, made unique
        (names("adev", [2, 4, 5, 6, 7]), "adev[2,4-7]"),  # SI
        (names("linux", range(18), 2), "linux[00-17]"),  # SI
        (names("dev", [*range(9), *range(18, 26)]), "dev[0-8,18-25]"),  # SC
        (["dev5", "dev0"], "dev[0,5]"),  # SI
        (["node01", "node02"], "node[01-02]"),  # SR
        (["snowflake0"], "snowflake0"),  # SCT: NodeList=snowflake0
    ],
)
def test_compress_gives_the_documented_form(names_: list[str], documented: str) -> None:
    assert compress_hostlist(names_) == documented


@pytest.mark.parametrize("expr, message", [*REFUSED, ("node[1-2", "bad hostlist part")])
def test_what_slurm_refuses_is_refused_naming_the_part(expr: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        expand_hostlist(expr)


def test_text_after_the_last_range_is_kept_as_slurm_25_11_does() -> None:
    # SC says "unit[0-31]rack" is invalid; scontrol 22.05 refuses it, 25.11 expands it.
    # Slurm never prints such names itself; we read them as 25.11 does.
    assert expand_hostlist("lx[08-10]-ib") == ["lx08-ib", "lx09-ib", "lx10-ib"]
    assert expand_hostlist("unit[0-1]rack") == ["unit0rack", "unit1rack"]


def _scontrols() -> list[tuple[str, str]]:
    found = []
    if shutil.which("scontrol"):
        found.append(("22.05", shutil.which("scontrol")))
    prefix, _ = slurm2511_prefix()
    if prefix is not None and (prefix / "bin" / "scontrol").exists():
        found.append(("25.11", str(prefix / "bin" / "scontrol")))
    return found


@pytest.mark.parametrize("release, scontrol", _scontrols() or [pytest.param("", "", marks=[
    pytest.mark.skip(reason="no scontrol installed (make test installs Debian's Slurm)")])])  # fmt: skip
def test_scontrol_agrees_on_every_documented_expression(
    release: str, scontrol: str, tmp_path: Path
) -> None:
    # scontrol expands hostlists locally; it needs a slurm.conf with a name, not a daemon.
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=hostlist\nSlurmctldHost=localhost\n")
    env = {"SLURM_CONF": str(conf), "PATH": "/usr/bin:/bin"}

    def scontrol_says(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [scontrol, "show", *args], capture_output=True, text=True, env=env, timeout=30
        )

    for expr, expected, _ in DOCUMENTED:
        out = scontrol_says("hostnames", expr)
        assert out.returncode == 0, f"{release} {expr}: {out.stderr}"
        assert out.stdout.split() == expand_hostlist(expr), f"{release}: {expr}"
        unique = sorted(set(expected))
        ours = compress_hostlist(unique)
        assert scontrol_says("hostnames", ours).stdout.split() == expand_hostlist(ours)
    for expr, _ in REFUSED:
        out = scontrol_says("hostnames", expr)
        assert out.returncode != 0 or not out.stdout.strip(), f"{release} accepted {expr}"
