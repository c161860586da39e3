"""Golden records: what the suite generates for users and Slurm, checked byte for byte
against committed files under tests/golden/ (as submitit does for its sbatch files).

A change to a template, to rendering, to the hook or to the table writer shows up here as
a diff to review. When the change is meant, regenerate the files and commit them with it:

    .venv/bin/python -m pytest tests/test_golden.py --update-golden
    git diff tests/golden/

(--update-golden writes the files and reports those tests as skipped, so a run with it
never passes for a check it did not make.)
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_ext.cli.predict import predict
from slurm_ext.predict.elastic import amdahl_throughput
from slurm_ext.predict.hook import render_hook
from slurm_ext.templates.render import load_template, render, template_names, templates_dir

GOLDEN = Path(__file__).resolve().parent / "golden"
TEMPLATES_DIR = "<templates_dir>"  # the install's path, which differs between checkouts

# One fixed set of values per template, every variable type among them.
PARAMETERS: dict[str, dict[str, str]] = {
    "single-gpu": {"job_name": "resnet-1", "time": "02:30:00", "model": "resnet50"},
    "ddp-multinode": {"nodes": "4", "gpus_per_node": "8", "port_base": "21000", "model": "gpt2"},
    "elastic": {"min_gpus": "2", "max_gpus": "8", "global_batch": "512", "model": "bert-large"},
    "opportunistic": {"share": "shard:2", "gpu_mem_fraction": "0.5", "mem": "16G", "cpus": "4"},
    "requeue": {"signal_lead": "300", "time": "1-00:00:00", "mem_per_gpu": "24G"},
}
COMMON = {
    "script": "/opt/train/train.py",
    "args": "--epochs 5 --lr 0.1",
    "checkpoint_dir": "/scratch/$USER/ckpt/$SLURM_JOB_ID",
}


@pytest.fixture
def update(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


def check_golden(name: str, text: str, update: bool) -> None:
    path = GOLDEN / name
    if update:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        pytest.skip(f"wrote {path.relative_to(GOLDEN.parent)}")
    if not path.is_file():
        pytest.fail(f"no golden file {path}: run pytest {__file__} --update-golden")
    expected = path.read_text()
    if text != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(True), text.splitlines(True), f"golden/{name}", "generated"
            )
        )
        pytest.fail(
            f"generated output differs from tests/golden/{name} (if meant, rerun with "
            f"--update-golden and commit the new file):\n{diff}"
        )


def test_every_template_has_golden_parameters() -> None:
    assert sorted(PARAMETERS) == template_names()


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_template_rendered_with_defaults(name: str, update: bool) -> None:
    text = render(load_template(name))
    where = str(templates_dir().resolve())
    assert where in text  # the default trainer sits beside the templates
    check_golden(f"templates/{name}.defaults.sbatch", text.replace(where, TEMPLATES_DIR), update)


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_template_rendered_with_fixed_parameters(name: str, update: bool) -> None:
    text = render(load_template(name), {**COMMON, **PARAMETERS[name]})
    assert str(templates_dir().resolve()) not in text
    check_golden(f"templates/{name}.sbatch", text, update)


def test_rendered_hook(update: bool) -> None:
    text = render_hook(
        "/var/lib/slurm-ext/predictor.tsv",
        respect_explicit_cpus=False,
        max_cpus_per_gpu=16,
        gpus_per_node=4,
    )
    check_golden("job_submit.lua", text, update)


def test_predictor_table_built_by_the_cli(tmp_path: Path, update: bool) -> None:
    # Noise-free saturating curves (utilisation 0.9 x min(1, cores / knee)), a lone sample
    # (too few to fit: site default), an untyped workload and an elastic one.
    samples = [
        {"key": key, "gpu_type": gpu, "cores_per_gpu": c, "gpu_util": round(0.9 * min(1, c / k), 4)}
        for key, gpu, k, cores in [
            ("resnet50", "v100", 7, [2, 4, 6, 8, 10, 12]),
            ("resnet50", "a100", 10, [2, 4, 8, 12, 16, 20]),
            ("overfeat", "v100", 40, [8, 16, 24, 32, 40, 48]),
            ("user1/train", "", 4, [1, 2, 3, 4, 6, 8]),
        ]
        for c in cores
    ] + [{"key": "lonely", "gpu_type": "v100", "cores_per_gpu": 4, "gpu_util": 0.5}]
    sp = tmp_path / "samples.jsonl"
    sp.write_text("".join(json.dumps(s) + "\n" for s in samples))
    wl = tmp_path / "elastic.json"
    wl.write_text(
        json.dumps(
            [
                {"key": "bert", "min_gpus": 1, "max_gpus": 4, "throughput": amdahl_throughput(0.05, 4)},
                {"key": "resnet50", "min_gpus": 1, "max_gpus": 8, "throughput": amdahl_throughput(0.2, 8)},
            ]
        )
    )  # fmt: skip
    table = tmp_path / "predictor.tsv"
    args = ["build", "--samples", str(sp), "--out", str(table), "--elastic", str(wl)]
    result = CliRunner().invoke(predict, [*args, "--free-gpus", "8"])
    assert result.exit_code == 0, result.output
    check_golden("predictor.tsv", table.read_text(), update)
