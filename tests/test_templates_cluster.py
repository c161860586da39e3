"""The sbatch templates on a real local Slurm: --test-only for each, real tiny trainings
(single process, 2-node DDP over gloo, an elastic job resized by the submit hook), and
checkpoint-and-requeue surviving a requeue.

Uses its own 2-node cluster configured with etc/slurm.conf.snippet, its required and
recommended lines (gres/shard for the opportunistic template, the lua submit hook), so
the session cluster stays as it is.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import snippet_lines, wait_for

from nodeagent.progress import parse_tail
from slurm_ext.predict.hook import render_hook
from slurm_ext.templates.render import load_template, render, template_names
from slurm_ext.testing.cluster import LocalCluster

pytestmark = pytest.mark.slurm

PYTHON = str(Path(sys.executable))  # the venv's interpreter, the one with torch
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


def _torch_missing() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return True
    return False


needs_torch = pytest.mark.skipif(
    _torch_missing(),
    reason="torch is not importable in this venv (scripts/install-deps.sh installs it)",
)


# the hook's table: elastic jobs of model mlp-elastic get 2 GPUs and 3 cores per GPU
TABLE = "# slurm-ext predictor table v1\nmlp-elastic\t*\t3\t2\n# end 1\n"


def snippet_settings() -> dict[str, str]:
    """etc/slurm.conf.snippet's `Key=Value` settings, required and recommended."""
    settings = {}
    for line in snippet_lines():
        key, sep, value = line.partition("=")
        assert sep, f"etc/slurm.conf.snippet: not Key=Value: {line!r}"
        settings[key] = value
    return settings


class SnippetCluster(LocalCluster):
    """LocalCluster configured with etc/slurm.conf.snippet merged in (priority weights,
    the lua hook, cons_tres, DefCpuPerGPU, gres/shard: 4 shards per GPU). Its requeued
    jobs may restart after 6 s instead of 121 s: Slurm holds a requeued job for AuthInfo
    cred_expire + 1 s (default 120 s) and refuses an earlier StartTime=now launch."""

    def _write_files(self) -> None:
        super()._write_files()
        assert self.root is not None
        settings = snippet_settings()
        lines, merged = [], set()
        for line in self.conf_path.read_text().splitlines():
            key = line.partition("=")[0]
            if key in settings:
                line = f"{key}={settings[key]}"
                merged.add(key)
            if key == "NodeName" and line.startswith("NodeName=DEFAULT"):
                lines += [f"{k}={v}" for k, v in settings.items() if k not in merged]
                merged.update(settings)
                line = line.replace(
                    f" Gres=gpu:{self.gpus_per_node} ",
                    f" Gres=gpu:{self.gpus_per_node},shard:{4 * self.gpus_per_node} ",
                )
            if line.startswith("AuthInfo="):
                line += ",cred_expire=5"
            lines.append(line)
        conf = "\n".join(lines) + "\n"
        for part in ("shard:", "GresTypes=gpu,shard", "cred_expire=5", "JobSubmitPlugins=lua"):
            assert part in conf, f"harness slurm.conf changed: no {part}"
        self.conf_path.write_text(conf)
        gres = self.root / "etc" / "gres.conf"
        shards = 4 * self.gpus_per_node
        gres.write_text(
            gres.read_text() + f"NodeName=node[1-{self.nodes}] Name=shard Count={shards}\n"
        )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    table = tmp_path_factory.mktemp("predictor") / "predictor.tsv"
    table.write_text(TABLE)
    c = SnippetCluster(
        nodes=2, gpus_per_node=4, cpus_per_node=16, job_submit_lua=render_hook(table)
    )
    c.start()
    try:
        yield c
    finally:
        c.cleanup()


def test_snippet_settings_are_live(cluster: LocalCluster) -> None:
    config = cluster.run("scontrol", "show", "config")
    for key in ("PriorityWeightAge", "JobSubmitPlugins", "GresTypes", "SelectType"):
        assert re.search(rf"^{key}\s*=\s*{re.escape(snippet_settings()[key])}\s*$", config, re.M), (
            key
        )
    want = snippet_settings()["DefCpuPerGPU"]
    assert re.search(rf"^JobDefaults\s*=\s*DefCpuPerGPU={want}$", config, re.M)
    assert "shard:16" in cluster.run("sinfo", "-h", "-N", "-o", "%G")


def write_job(tmp_path: Path, name: str, **values: str) -> Path:
    values.setdefault("python", PYTHON)
    script = tmp_path / f"{name}.sh"
    script.write_text(render(load_template(name), values))
    return script


def submit(cluster: LocalCluster, script: Path) -> int:
    out = cluster.run("sbatch", "--parsable", f"--chdir={script.parent}", str(script))
    return int(out.strip().split(";")[0])


def job_field(cluster: LocalCluster, job_id: int, key: str) -> str:
    out = cluster.run("scontrol", "show", "job", "-o", str(job_id))
    m = re.search(rf"\b{key}=(\S*)", out)
    assert m, f"no {key} in {out}"
    return m.group(1)


def wait_done(cluster: LocalCluster, job_id: int, timeout: float = 90) -> str:
    try:
        return wait_for(
            lambda: (s := job_field(cluster, job_id, "JobState")) in FINAL and s,
            timeout=timeout,
            interval=0.5,
            what=f"job {job_id} to finish",
        )
    except AssertionError:
        cluster.run("scancel", str(job_id), check=False)
        raise


def done_summary(output: Path) -> dict:
    text = output.read_text()
    lines = [line for line in text.splitlines() if line.startswith("SLURM_EXT_TRAIN_DONE ")]
    assert lines, f"no SLURM_EXT_TRAIN_DONE line in {output}:\n{text}"
    return json.loads(lines[-1].split(" ", 1)[1])


@pytest.mark.parametrize("name", template_names())
def test_every_template_passes_sbatch_test_only(
    cluster: LocalCluster, tmp_path: Path, name: str
) -> None:
    script = write_job(tmp_path, name)  # the defaults, only the interpreter changed
    res = subprocess.run(
        ["sbatch", "--test-only", f"--chdir={tmp_path}", str(script)],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert res.returncode == 0, f"{name}: {res.stderr}"
    assert re.search(r"Job \d+ to start at", res.stderr), res.stderr


@needs_torch
def test_single_gpu_template_trains_to_completion(cluster: LocalCluster, tmp_path: Path) -> None:
    script = write_job(
        tmp_path,
        "single-gpu",
        args="--epochs 3 --steps-per-epoch 20",
        progress_file=f"{tmp_path}/progress-$SLURM_JOB_ID",
    )
    job = submit(cluster, script)
    assert job_field(cluster, job, "Comment") == "model=mlp-tiny"
    state = wait_done(cluster, job)
    output = tmp_path / f"train-1gpu-{job}.out"
    assert state == "COMPLETED", output.read_text()
    summary = done_summary(output)
    assert summary["world_size"] == 1 and summary["device"] == "cpu"
    assert summary["last_epoch"] == 2 and summary["resumed_from"] is None
    assert summary["last_loss"] < summary["first_loss"] / 5  # it did learn
    assert sorted(p.name for p in (tmp_path / "checkpoints" / str(job)).iterdir()) == [
        "epoch-0000.pt",
        "epoch-0001.pt",
        "epoch-0002.pt",
    ]
    assert "gpus=1" in output.read_text()  # Slurm granted the GPU the script asked for
    # the progress lines the node agent reads: from 0 to all 60 steps
    points = parse_tail((tmp_path / f"progress-{job}").read_bytes(), from_start=True)
    assert points is not None and points[0][1] == 0 and points[-1][1] == 60


@needs_torch
def test_ddp_template_trains_on_two_nodes_with_gloo(cluster: LocalCluster, tmp_path: Path) -> None:
    script = write_job(
        tmp_path,
        "ddp-multinode",
        nodes="2",
        gpus_per_node="1",
        args="--epochs 2 --steps-per-epoch 10",
    )
    job = submit(cluster, script)
    state = wait_done(cluster, job, timeout=120)
    output = tmp_path / f"train-ddp-{job}.out"
    text = output.read_text()
    assert state == "COMPLETED", text
    assert job_field(cluster, job, "NodeList") == "node[1-2]"
    assert f"rendezvous=localhost:{20000 + job % 10000}" in text
    summary = done_summary(output)
    assert summary["world_size"] == 2
    assert "[rank 1/2 cpu] epoch 1" in text and "[rank 0/2 cpu] epoch 1" in text
    assert summary["last_loss"] < summary["first_loss"]


def _requeue_job(cluster: LocalCluster, tmp_path: Path) -> tuple[int, Path]:
    script = write_job(
        tmp_path,
        "requeue",
        args="--epochs 4 --steps-per-epoch 5 --epoch-seconds 1",
        progress_file=f"{tmp_path}/progress-$SLURM_JOB_ID",
    )
    job = submit(cluster, script)
    ckpt = tmp_path / "checkpoints" / str(job)
    wait_for(
        lambda: (ckpt / "epoch-0001.pt").exists(), timeout=60, what=f"job {job}'s 2nd checkpoint"
    )
    return job, tmp_path / f"train-requeue-{job}.out"


def wait_requeued(cluster: LocalCluster, job: int) -> None:
    wait_for(lambda: job_field(cluster, job, "Restarts") == "1", what=f"job {job} requeued")


@needs_torch
def test_requeue_template_survives_scontrol_requeue(cluster: LocalCluster, tmp_path: Path) -> None:
    job, output = _requeue_job(cluster, tmp_path)
    cluster.run("scontrol", "requeue", str(job))
    wait_requeued(cluster, job)
    state = wait_done(cluster, job)
    text = output.read_text()
    assert state == "COMPLETED", text
    summary = done_summary(output)
    assert summary["restart_count"] == 1
    assert summary["resumed_from"] is not None and summary["resumed_from"] >= 1
    assert summary["start_epoch"] == summary["resumed_from"] + 1 and summary["last_epoch"] == 3
    # one log across both runs (--open-mode=append): the first run's epochs are still there
    assert "restart=0" in text and "restart=1" in text and "epoch 0 loss" in text
    # both runs appended to one progress file, the second counting on from its checkpoint
    # (steps done after it in the first run are counted again: the agent then keeps only
    # the points after the step back)
    raw = (tmp_path / f"progress-{job}").read_bytes()
    counts = [int(line.split()[1]) for line in raw.decode().splitlines()]
    assert counts[0] == 0 and (summary["resumed_from"] + 1) * 5 in counts[1:]
    points = parse_tail(raw, from_start=True)
    assert points is not None and points[-1][1] == 20


@needs_torch
def test_requeue_template_checkpoints_and_requeues_itself_on_usr1(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """What --signal=B:USR1@120 does before the limit, sent now: the script requeues itself."""
    job, output = _requeue_job(cluster, tmp_path)
    cluster.run("scancel", "--batch", "--signal=USR1", str(job))
    wait_requeued(cluster, job)
    state = wait_done(cluster, job)
    text = output.read_text()
    assert state == "COMPLETED", text
    assert "slurm-ext: USR1, asking the training to checkpoint and requeue" in text
    assert f"scontrol requeue {job}" in text
    summary = done_summary(output)
    assert summary["restart_count"] == 1 and summary["resumed_from"] >= 1


@needs_torch
def test_elastic_template_runs_on_the_gpu_count_the_hook_grants(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    script = write_job(
        tmp_path,
        "elastic",
        model="mlp-elastic",
        min_gpus="1",
        max_gpus="4",
        global_batch="64",
        args="--epochs 1 --steps-per-epoch 5",
    )
    job = submit(cluster, script)
    # asked for gpu:1; the hook's table says 2 GPUs and 3 cores per GPU for mlp-elastic
    assert job_field(cluster, job, "TresPerNode") == "gres:gpu:2"
    assert job_field(cluster, job, "CpusPerTres") == "gres:gpu:3"
    state = wait_done(cluster, job)
    output = tmp_path / f"train-elastic-{job}.out"
    text = output.read_text()
    assert state == "COMPLETED", text
    assert "granted 2 GPUs (range 1-4), batch 32 per GPU" in text
    assert done_summary(output)["world_size"] == 2
