"""The submit hook inside a real slurmctld (JobSubmitPlugins=lua, Debian's Lua 5.1).

Own module-scoped cluster (the session one runs without the hook), with a partition limit
MaxCPUsPerNode=12 so capping is exercised. Each job's outcome is read back from Slurm and
compared with the Python twin (`plan_rewrite`) given the same table and request.
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
from conftest import wait_for

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


@pytest.fixture(scope="module")
def hooked(tmp_path_factory) -> Iterator[LocalCluster]:
    root = tmp_path_factory.mktemp("hook")
    cluster = LocalCluster(
        nodes=2,
        root=root,
        job_submit_lua=render_hook(root / "predictor.tsv"),
        extra_conf=f"PartitionName=DEFAULT MaxCPUsPerNode={MAX_CPUS_PER_NODE}",
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
]


def _request(args: list[str], fields: dict) -> JobRequest:
    comment = next((a.split("=", 1)[1] for a in args if a.startswith("--comment=")), None)
    fields = {"name": "wrap", **fields}
    return JobRequest(
        comment=comment, user_name=USER, max_cpus_per_node=MAX_CPUS_PER_NODE, **fields
    )


def test_rewrites_match_python_twin(hooked: LocalCluster) -> None:
    atomic_write(table_path(hooked), TABLE)
    table = parse_table(TABLE)
    outcomes = {}
    for args, fields in CASES:
        job_id, told = submit(hooked, *args)
        rec = job_record(hooked, job_id)
        want = plan_rewrite(_request(args, fields), table, HookConfig())
        before = {
            "tres_per_node": fields.get("tres_per_node", ""),
            "cpus_per_tres": fields.get("cpus_per_tres", ""),
        }
        for fld in ("tres_per_node", "cpus_per_tres"):
            assert rec[fld] == want.changes.get(fld, before[fld]), (args, fld, rec[fld])
        assert rec["admin_comment"] == want.note, args
        assert (want.note in told) if want.note else ("slurm-ext" not in told), (args, told)
        outcomes[" ".join(args)] = want.changes
    # the cases do rewrite (and what), not only agree on leaving jobs alone
    assert outcomes["--gres=gpu:1 --comment=model=resnet50"] == {"cpus_per_tres": "gres:gpu:7"}
    assert outcomes["--gres=gpu:2 --comment=model=overfeat"] == {"cpus_per_tres": "gres:gpu:6"}
    assert outcomes["--gres=gpu:1 -J tagless.sh"] == {"cpus_per_tres": "gres:gpu:3"}
    assert outcomes["--gres=gpu:1 --comment=model=bert elastic=1-4"] == {
        "tres_per_node": "gres:gpu:3",
        "cpus_per_tres": "gres:gpu:4",
    }
    assert outcomes["--gpus=2 --comment=model=resnet50"] == {"cpus_per_tres": "gres:gpu:6"}
    assert sum(1 for c in outcomes.values() if not c) == 7


def test_rewritten_job_gets_the_cpus(hooked: LocalCluster) -> None:
    atomic_write(table_path(hooked), TABLE)
    job_id = hooked.sbatch("--gres=gpu:1", "--comment=model=resnet50", wrap="sleep 30")
    try:
        wait_for(lambda: job_record(hooked, job_id)["job_state"] == "RUNNING", what="job running")
        out = hooked.run("scontrol", "show", "job", str(job_id))
        assert "NumCPUs=7 " in out and "CpusPerTres=gres:gpu:7" in out
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
        "gres:gpu:1",
        "",
    )
    assert "slurm-ext" not in told
    log = wait_for(
        lambda: [ln for ln in hooked.log().splitlines() if "slurm-ext hook" in ln], what="log"
    )
    assert "unchanged" in log[-1]
    assert hooked.run("sinfo", "-h", "-o", "%a").strip() == "up"  # slurmctld alive
