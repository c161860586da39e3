"""The pyslurm backend's mapping, on pyslurm-shaped records, against the CLI backend.

pyslurm cannot be built here (Debian 12 ships Slurm 22.05, pyslurm 25.11 needs 25.11
headers), so the records in tests/data/pyslurm_25.11_*.json carry pyslurm 25.11.2's
attribute names and value types as read from its source, and each one is checked against
the model.Job/Node the CLI backend makes from the equivalent squeue/sinfo record (recorded
from Slurm 22.05 where one exists). The RPC shell is exercised against a small stand-in
for the `pyslurm` module (third-party surface only: Job, Jobs, JobSubmitDescription,
RPCError), to check which pyslurm calls each method makes and how errors translate.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from slurm_ext.core.model import Job, JobState, Node
from slurm_ext.slurm.cli_backend import job_from_squeue, node_from_sinfo
from slurm_ext.slurm.client import JobNotFound, SlurmError, SlurmUnavailable
from slurm_ext.slurm.gres import parse_gpus
from slurm_ext.slurm.pyslurm_backend import (
    PySlurmClient,
    job_from_pyslurm,
    node_from_pyslurm,
    request_text,
    translate_error,
    tres_text,
)

DATA = Path(__file__).parent / "data"


def _load(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text())


def pyslurm_shaped(value: Any) -> Any:
    """Fixture JSON -> objects with pyslurm's attribute access (TrackableResources too)."""
    if isinstance(value, dict) and value.get("_pyslurm_type") == "TrackableResources":
        fields = {k: types.SimpleNamespace(count=v) for k, v in value.items() if k != "gres"}
        fields.pop("_pyslurm_type")
        gres = {
            k: types.SimpleNamespace(count=g["count"], type=g["type"])
            for k, g in value["gres"].items()
        }
        return types.SimpleNamespace(gres=gres, **fields)
    return value


def record(attrs: dict[str, Any]) -> types.SimpleNamespace:
    return types.SimpleNamespace(**{k: pyslurm_shaped(v) for k, v in attrs.items()})


JOB_CASES = _load("pyslurm_25.11_jobs.json")["cases"]
NODE_CASES = _load("pyslurm_25.11_nodes.json")["cases"]
SQUEUE = {j["job_id"]: j for j in _load("squeue_22.05_recorded.json")["jobs"]}
SINFO = {n["name"]: n for n in _load("sinfo_22.05_recorded.json")["nodes"]}


def _squeue_for(case: dict[str, Any]) -> dict[str, Any]:
    if "squeue_recorded_job_id" in case:
        return SQUEUE[case["squeue_recorded_job_id"]]
    return case["squeue"]


def _spelling_free(job: Job) -> Job:
    """Slurm 22.05 spells requests `gres:gpu:4`, 23.02+ `gres/gpu:4`; compare those apart.
    The recorded pyslurm jobs carry no restart count (read as unknown: None) where
    squeue's JSON has restart_cnt."""
    return dataclasses.replace(job, tres_per_node="", cpus_per_tres="", restart_count=None)


def _cpus_per_gpu(text: str) -> int:
    return int(text.rsplit(":", 1)[1]) if text else 0


@pytest.mark.parametrize("case", JOB_CASES, ids=[c["case"] for c in JOB_CASES])
def test_job_mapping_matches_cli_backend(case: dict[str, Any]) -> None:
    py = job_from_pyslurm(record(case["pyslurm"]))
    cli = job_from_squeue(_squeue_for(case))
    assert _spelling_free(py) == _spelling_free(cli)
    assert parse_gpus(py.tres_per_node) == parse_gpus(cli.tres_per_node)
    assert _cpus_per_gpu(py.cpus_per_tres) == _cpus_per_gpu(cli.cpus_per_tres)


@pytest.mark.parametrize("case", JOB_CASES, ids=[c["case"] for c in JOB_CASES])
def test_job_mapping_expected_values(case: dict[str, Any]) -> None:
    job = job_from_pyslurm(record(case["pyslurm"]))
    for key, want in case["expect"].items():
        got = getattr(job, key)
        if isinstance(got, tuple):
            got = list(got)
        if isinstance(got, JobState):
            got = got.value
        assert got == want, f"{key}: {got!r} != {want!r}"


def test_multi_node_running_job_in_full() -> None:
    case = next(c for c in JOB_CASES if c.get("squeue_recorded_job_id") == 2)
    assert job_from_pyslurm(record(case["pyslurm"])) == Job(
        job_id=2,
        name="wrap",
        user="root",
        partition="gpu",
        state=JobState.RUNNING,
        reason="None",
        priority=1,
        gpus=8,
        gpus_per_node=4,
        num_nodes=2,
        cpus=2,
        submit_time=1795384841.0,
        start_time=1795384841.0,
        time_limit_s=525600 * 60.0,
        nodes=("node2", "node3"),
        requeue=True,
        tres_per_node="gres/gpu:4",
    )


def test_per_job_gpus_lost_without_tracked_gpu_tres() -> None:
    """Known gap: pyslurm 25.11.2 returns tres_per_job=None for `gres/gpu:3`, so a
    --gpus job reads as 0 GPUs unless gres/gpu is in AccountingStorageTRES."""
    case = next(c for c in JOB_CASES if c.get("squeue_recorded_job_id") == 3)
    attrs = dict(case["pyslurm"])
    untracked = {"_pyslurm_type": "TrackableResources", "cpu": 1, "gres": {}}
    attrs.update(allocated_tres=untracked, requested_tres=untracked)
    assert job_from_pyslurm(record(attrs)).gpus == 0
    assert job_from_squeue(SQUEUE[3]).gpus == 3


def test_raw_strings_are_read_like_the_cli() -> None:
    """A future pyslurm that returns strings (or parses `gres/gpu:N`) still maps."""
    case = next(c for c in JOB_CASES if c.get("squeue_recorded_job_id") == 2)
    attrs = dict(case["pyslurm"], gres_per_node=None, tres_per_node="gres/gpu:a100:4")
    job = job_from_pyslurm(record(attrs))
    assert (job.gpus, job.gpus_per_node, job.gpu_type) == (8, 4, "a100")


def test_gres_text_forms() -> None:
    tres = pyslurm_shaped(
        {
            "_pyslurm_type": "TrackableResources",
            "cpu": 8,
            "gres": {"gpu": {"count": 4, "type": None}, "gpu:a100": {"count": 4, "type": "a100"}},
        }
    )
    assert tres_text(tres) == "gres/gpu=4,gres/gpu:a100=4"
    assert parse_gpus(tres_text(tres)) == (4, "a100")
    assert request_text({"gres/gpu:a100": 2}) == "gres/gpu:a100:2"
    assert request_text({"gpu": {"count": 2, "indexes": "0-1"}}) == "gres/gpu:2"
    assert request_text(None) == "" and tres_text(None) == ""
    assert request_text("gres:gpu:2") == "gres:gpu:2"


@pytest.mark.parametrize("case", NODE_CASES, ids=[c["case"] for c in NODE_CASES])
def test_node_mapping_matches_cli_backend(case: dict[str, Any]) -> None:
    py = node_from_pyslurm(record(case["pyslurm"]))
    sinfo = SINFO[case["sinfo_recorded_name"]] if "sinfo_recorded_name" in case else case["sinfo"]
    assert py == node_from_sinfo(sinfo)
    for key, want in case["expect"].items():
        got = getattr(py, key)
        assert (list(got) if isinstance(got, tuple) else got) == want, key


def test_drained_node_offers_no_gpus() -> None:
    case = next(c for c in NODE_CASES if c["case"] == "drained idle node")
    node = node_from_pyslurm(record(case["pyslurm"]))
    assert node == Node(
        name="gpu6",
        state="IDLE+DRAIN",
        cpus=64,
        gpus=4,
        gpu_type="a100",
        features=("a100",),
        partitions=("gpu",),
    )
    assert not node.schedulable and node.gpus_free == 0


# ---- error translation ----------------------------------------------------------------
class RPCError(Exception):
    """Shaped like pyslurm.RPCError: .errno and .msg, str() is the message."""

    def __init__(self, errno: int, msg: str) -> None:
        self.errno, self.msg = errno, msg
        super().__init__(msg)


@pytest.mark.parametrize(
    ("errno", "msg", "cls"),
    [
        (2017, "Invalid job id specified", JobNotFound),
        (2021, "Job/step already completing or completed", JobNotFound),
        (1800, "Unable to contact slurm controller (connect failure)", SlurmUnavailable),
        (5004, "Socket timed out on send/recv operation", SlurmUnavailable),
        (2002, "Access/permission denied", SlurmError),
        (-1, "Unable to contact slurm controller (connect failure)", SlurmUnavailable),
    ],
)
def test_translate_error(errno: int, msg: str, cls: type[SlurmError]) -> None:
    err = translate_error("pyslurm.Job(7).hold()", RPCError(errno, msg))
    assert type(err) is cls
    assert err.command == "pyslurm.Job(7).hold()"
    assert msg in err.message


# ---- the RPC shell, against a stand-in for the third-party pyslurm module -------------
def _stand_in_pyslurm(calls: list[tuple[Any, ...]]) -> types.ModuleType:
    mod = types.ModuleType("pyslurm")

    class PyslurmError(Exception):
        pass

    class StandInRPCError(PyslurmError):
        def __init__(self, errno: int, msg: str) -> None:
            self.errno, self.msg = errno, msg
            super().__init__(msg)

    class JobSubmitDescription:
        def __init__(self, **fields: Any) -> None:
            self.fields = fields

    class StandInJob:
        def __init__(self, job_id: int) -> None:
            self.id = job_id

        def _rpc(self, what: str, *args: Any) -> None:
            if self.id == 404:
                raise StandInRPCError(2017, "Invalid job id specified")
            calls.append((what, self.id, *args))

        def modify(self, desc: JobSubmitDescription) -> None:
            self._rpc("modify", desc.fields)

        def hold(self) -> None:
            self._rpc("hold")

        def release(self) -> None:
            self._rpc("release")

        def suspend(self) -> None:
            self._rpc("suspend")

        def unsuspend(self) -> None:
            self._rpc("unsuspend")

        def requeue(self) -> None:
            self._rpc("requeue")

    class Jobs(dict):
        @staticmethod
        def load() -> Jobs:
            return Jobs({c["pyslurm"]["id"]: record(c["pyslurm"]) for c in JOB_CASES})

    class Nodes(dict):
        @staticmethod
        def load() -> Nodes:
            raise StandInRPCError(1800, "Unable to contact slurm controller (connect failure)")

    mod.PyslurmError, mod.RPCError = PyslurmError, StandInRPCError
    mod.Job, mod.Jobs, mod.Nodes = StandInJob, Jobs, Nodes
    mod.JobSubmitDescription = JobSubmitDescription
    return mod


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[tuple[Any, ...]]:
    """A stand-in pyslurm, and stand-in sprio/squeue on PATH for what the backend reads
    through the command line (pending jobs' site factors and --gpus requests)."""
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setitem(sys.modules, "pyslurm", _stand_in_pyslurm(calls))
    bins = tmp_path / "bin"
    bins.mkdir()
    for name, body in (("sprio", "printf '10|5\\n11|0\\n'"), ("squeue", "true")):
        (bins / name).write_text(f"#!/bin/sh\n{body}\n")
        (bins / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bins}:{os.environ.get('PATH', '')}")
    return calls


def test_client_reads_and_filters_states(stand_in: list[tuple[Any, ...]]) -> None:
    client = PySlurmClient()
    assert sorted(j.job_id for j in client.jobs()) == [1, 2, 3, 10, 11]
    pending = client.jobs(states=["PENDING"])
    assert [(j.job_id, j.site_factor) for j in pending] == [(10, 5), (11, 0)]  # from sprio
    with pytest.raises(SlurmUnavailable, match="Unable to contact slurm controller"):
        client.nodes()


def test_client_writes_use_job_submit_description(stand_in: list[tuple[Any, ...]]) -> None:
    client = PySlurmClient()
    client.set_priority(5, 1000)
    client.set_nice(5, -3)
    client.set_site_factor(5, 250)
    client.set_placement(5, required_nodes=["node1", "node2"], excluded_nodes=["node4"])
    for action in ("hold", "release", "suspend", "resume", "requeue"):
        getattr(client, action)(5)
    assert stand_in == [
        ("modify", 5, {"priority": 1000}),
        ("modify", 5, {"nice": -3}),
        ("modify", 5, {"site_factor": 250}),
        ("modify", 5, {"required_nodes": ["node1", "node2"], "excluded_nodes": ["node4"]}),
        ("hold", 5),
        ("release", 5),
        ("suspend", 5),
        ("unsuspend", 5),
        ("requeue", 5),
    ]


def _recording_scontrol(tmp_path: Path) -> tuple[str, Path]:
    """A bin dir whose scontrol appends its arguments to a file (and succeeds)."""
    log = tmp_path / "scontrol.log"
    exe = tmp_path / "scontrol"
    exe.write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    exe.chmod(0o755)
    return str(tmp_path), log


def test_client_writes_pyslurm_would_drop_through_scontrol(
    stand_in: list[tuple[Any, ...]], tmp_path: Path
) -> None:
    """JobSubmitDescription drops 0s and empty lists, and node counts on modify: those
    go through `scontrol update`, the rest stays in pyslurm."""
    bin_dir, log = _recording_scontrol(tmp_path)
    client = PySlurmClient(bin_dir=bin_dir)
    client.set_nice(5, 0)
    client.set_site_factor(5, 0)
    client.set_placement(5, required_nodes=["node1"], num_nodes=1)
    client.set_placement(5, excluded_nodes=[])
    client.set_placement(5, required_nodes=["node2"])
    assert log.read_text().splitlines() == [
        "update JobId=5 Nice=0",
        "update JobId=5 SiteFactor=0",
        "update JobId=5 ReqNodeList=node1 NumNodes=1",
        "update JobId=5 ExcNodeList=",
    ]
    assert stand_in == [("modify", 5, {"required_nodes": ["node2"]})]


def test_client_unknown_job_raises_job_not_found(stand_in: list[tuple[Any, ...]]) -> None:
    client = PySlurmClient()
    with pytest.raises(JobNotFound, match="Invalid job id specified") as info:
        client.hold(404)
    assert info.value.command == "pyslurm.Job(404).hold()"
    with pytest.raises(JobNotFound):
        client.set_priority(404, 1)


def test_without_pyslurm_explains_and_leaves_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyslurm", None)  # `import pyslurm` -> ImportError
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/original.conf")
    with pytest.raises(SlurmError, match=r"install slurm-ext\[pyslurm\] matching your Slurm"):
        PySlurmClient(slurm_conf="/tmp/other/slurm.conf")
    assert os.environ["SLURM_CONF"] == "/etc/slurm/original.conf"


def test_slurm_conf_is_exported_before_import(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A stand-in package records SLURM_CONF at import time, as libslurm init would."""
    monkeypatch.delenv("SLURM_CONF", raising=False)
    pkg = tmp_path / "pyslurm"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("import os\nSEEN_SLURM_CONF = os.environ.get('SLURM_CONF')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    conf = str(tmp_path / "slurm.conf")
    sys.modules.pop("pyslurm", None)
    try:
        client = PySlurmClient(slurm_conf=conf)
        assert client._pyslurm.SEEN_SLURM_CONF == conf
        assert os.environ["SLURM_CONF"] == conf
    finally:
        sys.modules.pop("pyslurm", None)


def test_client_skips_an_unreadable_record_like_the_cli_backend(
    stand_in: list[tuple[Any, ...]], caplog: pytest.LogCaptureFixture
) -> None:
    """One odd record is named in a warning and left out; the others are read."""
    pyslurm = sys.modules["pyslurm"]
    good = pyslurm.Jobs.load()
    broken = types.SimpleNamespace(id=99, state=object(), gres_per_node="gpu:x:y:z")
    pyslurm.Jobs.load = staticmethod(lambda: {**good, 99: broken})
    with caplog.at_level("WARNING", logger="slurm_ext.slurm"):
        jobs = PySlurmClient().jobs()
    assert sorted(j.job_id for j in jobs) == [1, 2, 3, 10, 11]
    assert "skipping unreadable job 99" in caplog.text


def test_client_batch_writes_name_each_failure(
    stand_in: list[tuple[Any, ...]], tmp_path: Path
) -> None:
    bin_dir, log = _recording_scontrol(tmp_path)
    client = PySlurmClient(bin_dir=bin_dir)
    failed = client.set_site_factors({5: 250, 404: 7, 6: 0, 7: 300})
    assert sorted(failed) == [404]  # the unknown job; site factor 0 went through scontrol
    assert isinstance(failed[404], JobNotFound)
    assert stand_in == [("modify", 5, {"site_factor": 250}), ("modify", 7, {"site_factor": 300})]
    assert log.read_text().splitlines() == ["update JobId=6 SiteFactor=0"]
    assert client.set_priorities({5: 1000}) == {}


def test_both_backends_read_private_data_from_scontrol_show_config(
    stand_in: list[tuple[Any, ...]], tmp_path: Path
) -> None:
    """`scontrol show config` as 22.05 prints it (test_userview_privacy_live.py reads a
    real slurmctld's); pyslurm offers no call for it, so both backends run scontrol."""
    from slurm_ext.slurm.cli_backend import CliSlurmClient

    exe = tmp_path / "scontrol"
    exe.write_text(
        '#!/bin/sh\n[ "$*" = "show config" ] || exit 1\n'
        'printf "Configuration data as of 2026-01-01T00:00:00\\n'
        'PrivateData             = jobs,usage,users\\nProctrackType           = proctrack/linuxproc\\n"\n'
    )
    exe.chmod(0o755)
    for client in (CliSlurmClient(bin_dir=str(tmp_path)), PySlurmClient(bin_dir=str(tmp_path))):
        assert client.private_data() == {"jobs", "usage", "users"}
    exe.write_text('#!/bin/sh\necho "ProctrackType = proctrack/linuxproc"\n')
    with pytest.raises(SlurmError, match="no PrivateData line"):
        CliSlurmClient(bin_dir=str(tmp_path)).private_data()
