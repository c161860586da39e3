"""The submit hook inside a real slurmctld (JobSubmitPlugins=lua): Debian's 22.05 (Lua 5.1)
and 25.11 built from source (Lua 5.3), which hand the hook different spellings.

Own module-scoped cluster per release (the session ones run without the hook), with a
partition limit MaxCPUsPerNode=12 so capping is exercised. Each job's outcome is read back
from Slurm and compared with the Python twin (`plan_rewrite`) given the same table and
request, spelled as that release spells it.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import SLURM_VERSIONS, cluster_options, gres, wait_for

from slurm_ext.predict.hook import render_hook
from slurm_ext.predict.rewrite import HookConfig, JobRequest, plan_rewrite
from slurm_ext.predict.table import TableRow, atomic_write, parse_table, render_table
from slurm_ext.testing.cluster import LocalCluster

pytestmark = pytest.mark.slurm

MAX_CPUS_PER_NODE = 12
USER = pwd.getpwuid(os.getuid()).pw_name
TABLE = render_table(
    [
        TableRow("resnet50", "*", 7),
        TableRow("overfeat", "*", 38),
        TableRow("bert", "*", 5, gpus=3),
        TableRow(f"{USER}/tagless.sh", "*", 3),
    ]
)


@pytest.fixture(scope="module", params=SLURM_VERSIONS)
def hooked(request, tmp_path_factory) -> Iterator[LocalCluster]:
    options = cluster_options(request.param)
    root = tmp_path_factory.mktemp("hook")
    cluster = LocalCluster(
        nodes=2,
        root=root,
        job_submit_lua=render_hook(root / "predictor.tsv"),
        extra_conf=f"PartitionName=DEFAULT MaxCPUsPerNode={MAX_CPUS_PER_NODE}",
        **options,
    )
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.cleanup()


def table_path(cluster: LocalCluster) -> Path:
    assert cluster.root is not None
    return cluster.root / "predictor.tsv"


def submit(cluster: LocalCluster, *args: str, wrap: str = "true") -> tuple[int, str]:
    """sbatch (held); returns the job id and what sbatch told the user on stderr."""
    res = subprocess.run(
        ["sbatch", "--parsable", "--hold", f"--chdir={cluster.root}/jobs", *args, f"--wrap={wrap}"],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert res.returncode == 0, f"sbatch {args} refused: {res.stderr}"
    return int(res.stdout.strip().split(";")[0]), res.stderr


def job_record(cluster: LocalCluster, job_id: int) -> dict:
    """The job's squeue --json record (22.05's --json ignores -j, so pick it out)."""
    jobs = json.loads(cluster.run("squeue", "--json"))["jobs"]
    return next(j for j in jobs if j["job_id"] == job_id)


# (sbatch args, job name, JobRequest fields as slurmctld hands them to the hook)
CASES = [
    (["--gres=gpu:1", "--comment=model=resnet50"], {"tres_per_node": "gres:gpu:1"}),
    (["--gres=gpu:2", "--comment=model=overfeat"], {"tres_per_node": "gres:gpu:2"}),
    (["--gres=gpu:1", "-J", "tagless.sh"], {"tres_per_node": "gres:gpu:1", "name": "tagless.sh"}),
    (["--gres=gpu:1", "--comment=model=bert elastic=1-4"], {"tres_per_node": "gres:gpu:1"}),
    (["--gres=gpu:1", "--comment=model=resnet50 opt_out=cpu"], {"tres_per_node": "gres:gpu:1"}),
    (["--gres=gpu:1", "--comment=model=resnet50 slurm_ext=off"], {"tres_per_node": "gres:gpu:1"}),
    (
        ["--gres=gpu:1", "--cpus-per-gpu=2", "--comment=model=resnet50"],
        {"tres_per_node": "gres:gpu:1", "cpus_per_tres": "gres:gpu:2"},
    ),
    (
        ["--gres=gpu:1", "-c", "2", "--comment=model=resnet50"],
        {"tres_per_node": "gres:gpu:1", "cpus_per_task": 2},
    ),
    (["--gres=gpu:1", "--comment=model=nosuch"], {"tres_per_node": "gres:gpu:1"}),
    (["--comment=model=resnet50"], {}),
    (["--gpus=2", "--comment=model=resnet50"], {"tres_per_job": "gres:gpu:2"}),
    (["--gres=gpu:1", '--comment=model=x");os.exit(1)-- ]]'], {"tres_per_node": "gres:gpu:1"}),
    # every way to ask for GPUs (22.05 and 25.11 spell each differently; see _spelled)
    (["--gpus-per-node=2", "--comment=model=resnet50"], {"tres_per_node": "gres:gpu:2"}),
    (["--gpus=1", "--comment=model=overfeat"], {"tres_per_job": "gres:gpu:1"}),
    (
        ["--gpus-per-task=1", "-n", "2", "--comment=model=resnet50"],
        {"tres_per_task": "gres:gpu:1", "num_tasks": 2},
    ),
]


def _spelled(version: str, fields: dict) -> dict:
    """The fields as `version` hands them to the hook: 25.11 writes `gres/gpu:N`,
    `gres/gpu=N` for --gpus-per-task, and -c N also as `cpu=N` in tres_per_task."""
    out = {k: gres(version, v) if isinstance(v, str) else v for k, v in fields.items()}
    if version != "22.05" and "tres_per_task" in out:
        head, _, count = out["tres_per_task"].rpartition(":")
        out["tres_per_task"] = f"{head}={count}"
    if version != "22.05" and "cpus_per_task" in out:
        out["tres_per_task"] = f"cpu={out['cpus_per_task']}"
    return out


def _request(args: list[str], fields: dict) -> JobRequest:
    comment = next((a.split("=", 1)[1] for a in args if a.startswith("--comment=")), None)
    fields = {"name": "wrap", **fields}
    return JobRequest(
        comment=comment, user_name=USER, max_cpus_per_node=MAX_CPUS_PER_NODE, **fields
    )


def _version(cluster: LocalCluster) -> str:
    return (
        "22.05" if cluster.version < (23, 2) else f"{cluster.version[0]}.{cluster.version[1]:02d}"
    )


def test_rewrites_match_python_twin(hooked: LocalCluster) -> None:
    atomic_write(table_path(hooked), TABLE)
    table = parse_table(TABLE)
    version = _version(hooked)
    outcomes = {}
    for args, fields in CASES:
        fields = _spelled(version, fields)
        job_id, told = submit(hooked, *args)
        rec = job_record(hooked, job_id)
        want = plan_rewrite(_request(args, fields), table, HookConfig())
        for fld in ("tres_per_node", "tres_per_job", "tres_per_task", "cpus_per_tres"):
            before = fields.get(fld, "")
            assert rec[fld] == want.changes.get(fld, before), (args, fld, rec[fld])
        assert rec["admin_comment"] == want.note, args
        assert (want.note in told) if want.note else ("slurm-ext" not in told), (args, told)
        outcomes[" ".join(args)] = want.changes
    # the cases do rewrite (and what), not only agree on leaving jobs alone
    g = lambda n: gres(version, f"gres:gpu:{n}")  # noqa: E731
    assert outcomes["--gres=gpu:1 --comment=model=resnet50"] == {"cpus_per_tres": g(7)}
    assert outcomes["--gres=gpu:2 --comment=model=overfeat"] == {"cpus_per_tres": g(6)}
    assert outcomes["--gres=gpu:1 -J tagless.sh"] == {"cpus_per_tres": g(3)}
    assert outcomes["--gres=gpu:1 --comment=model=bert elastic=1-4"] == {
        "tres_per_node": g(3),
        "cpus_per_tres": g(4),
    }
    assert outcomes["--gpus=2 --comment=model=resnet50"] == {"cpus_per_tres": g(6)}
    assert outcomes["--gpus-per-node=2 --comment=model=resnet50"] == {"cpus_per_tres": g(6)}
    assert outcomes["--gpus=1 --comment=model=overfeat"] == {"cpus_per_tres": g(12)}
    assert outcomes["--gpus-per-task=1 -n 2 --comment=model=resnet50"] == {"cpus_per_tres": g(6)}
    assert sum(1 for c in outcomes.values() if not c) == 7


def test_rewritten_job_gets_the_cpus(hooked: LocalCluster) -> None:
    atomic_write(table_path(hooked), TABLE)
    job_id = hooked.sbatch("--gres=gpu:1", "--comment=model=resnet50", wrap="sleep 30")
    try:
        running = lambda: "RUNNING" in str(job_record(hooked, job_id)["job_state"])  # noqa: E731
        wait_for(running, what="job running")  # 25.11 says ["RUNNING"], 22.05 "RUNNING"
        out = hooked.run("scontrol", "show", "job", str(job_id))
        want = gres(_version(hooked), "gres:gpu:7")
        assert "NumCPUs=7 " in out and f"CpusPerTres={want}" in out
    finally:
        hooked.run("scancel", str(job_id), check=False)


BROKEN_TABLES = {
    "missing": None,
    "malformed": "this is not a table\n",
    "truncated": TABLE[: len(TABLE) - 10],
    "hostile": (
        "# slurm-ext predictor table v1\n"
        'resnet50"); os.exit(1) --\t*\t7\t0\n'
        "resnet50\t*\t-7\t0\n"
        "resnet50\t*\t99999999999999999999999\t0\n"
        "resnet50\t*\t7\t0\tos.execute('touch /tmp/pwned')\n"
        "]]..os.exit(1)..[[\t*\t7\t0\n"
        "# end 5\n"
    ),
}


@pytest.mark.parametrize("kind", list(BROKEN_TABLES))
def test_broken_table_accepts_jobs_unchanged(hooked: LocalCluster, kind: str) -> None:
    path = table_path(hooked)
    text = BROKEN_TABLES[kind]
    if text is None:
        path.unlink(missing_ok=True)
    else:
        atomic_write(path, text)
    mark = f"{time.time()}"
    job_id, told = submit(hooked, "--gres=gpu:1", f"--comment=model=resnet50 run={mark}")
    rec = job_record(hooked, job_id)
    assert (rec["cpus_per_tres"], rec["tres_per_node"], rec["admin_comment"]) == (
        "",
        gres(_version(hooked), "gres:gpu:1"),
        "",
    )
    assert "slurm-ext" not in told
    log = wait_for(
        lambda: [ln for ln in hooked.log().splitlines() if "slurm-ext hook" in ln], what="log"
    )
    assert "unchanged" in log[-1]
    assert hooked.run("sinfo", "-h", "-o", "%a").strip() == "up"  # slurmctld alive
