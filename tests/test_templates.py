"""Templates without a cluster: loading, rendering, checking and the `slurm-ext template` CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodeagent.progress import parse_tail, progress_rate
from slurm_ext.cli import main
from slurm_ext.templates.render import (
    TemplateError,
    check_script,
    load_template,
    render,
    template_names,
    templates_dir,
)

SHIPPED = ["ddp-multinode", "elastic", "opportunistic", "requeue", "single-gpu"]

GOOD = """\
#!/bin/bash
#SBATCH --time=01:00:00
#SBATCH --gres=gpu:2
#SBATCH --comment="model=resnet50 elastic=1-4"
export SLURM_EXT_MODEL=resnet50
python train.py
"""


def errors(text: str) -> list[str]:
    return [f"{p.line}: {p.message}" for p in check_script(text) if p.severity == "error"]


def test_all_shipped_templates_are_found_with_the_trainer() -> None:
    assert template_names() == SHIPPED
    assert (templates_dir() / "train_tiny.py").is_file()


@pytest.mark.parametrize("name", SHIPPED)
def test_every_template_renders_with_defaults_to_a_clean_script(name: str) -> None:
    t = load_template(name)
    assert t.description and t.variables
    text = render(t)
    assert "{{" not in text and "## var" not in text
    assert check_script(text) == []
    assert text.startswith("#!/bin/bash\n")
    # the built-in templates_dir makes the default trainer an absolute, existing path
    assert str(templates_dir().resolve() / "train_tiny.py") in text


@pytest.mark.parametrize("name", SHIPPED)
def test_every_template_exports_a_per_job_progress_file(name: str) -> None:
    text = render(load_template(name))
    want = 'export SLURM_EXT_PROGRESS_FILE="${TMPDIR:-/tmp}/slurm-ext-progress-$SLURM_JOB_ID"'
    assert want in text.splitlines()
    other = render(load_template(name), {"progress_file": "/dev/shm/p-$SLURM_JOB_ID"})
    assert 'export SLURM_EXT_PROGRESS_FILE="/dev/shm/p-$SLURM_JOB_ID"' in other


def test_train_tiny_writes_progress_lines_the_agent_reads(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    prog = tmp_path / "progress"
    env = dict(os.environ, SLURM_EXT_PROGRESS_FILE=str(prog))
    args = ["--epochs", "3", "--steps-per-epoch", "20", "--epoch-seconds", "0.5"]
    res = subprocess.run(
        [
            sys.executable,
            str(templates_dir() / "train_tiny.py"),
            *args,
            "--progress-interval",
            "0.4",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    points = parse_tail(prog.read_bytes(), from_start=True)
    assert points is not None and len(points) >= 4, prog.read_text()
    assert points[0][1] == 0 and points[-1][1] == 60  # first and last line: 0 and all steps
    assert all(b[0] - a[0] >= 0.4 for a, b in zip(points[1:-2], points[2:-1], strict=False))
    rate = progress_rate(points, now=points[-1][0])
    assert rate is not None and rate > 0


def test_hints_travel_in_comment_and_environment() -> None:
    text = render(
        load_template("elastic"), {"model": "bert-large", "min_gpus": "2", "max_gpus": "8"}
    )
    assert '#SBATCH --comment="model=bert-large elastic=2-8 checkpoint=1"' in text
    assert 'export SLURM_EXT_MODEL="bert-large"' in text
    assert 'export SLURM_EXT_ELASTIC="2-8"' in text
    assert "#SBATCH --gres=gpu:2\n" in text
    opp = render(load_template("opportunistic"))
    assert "opportunistic=1 checkpoint=1" in opp and "#SBATCH --gres=shard:1" in opp
    req = render(load_template("requeue"), {"signal_lead": "300"})
    assert "#SBATCH --requeue\n" in req and "#SBATCH --signal=B:USR1@300\n" in req
    assert '--comment="model=mlp-tiny checkpoint=1"' in req


def test_render_refuses_unknown_keys_naming_them() -> None:
    with pytest.raises(TemplateError, match=r"unknown variable\(s\) gpus, modle; known: job_name"):
        render(load_template("single-gpu"), {"modle": "x", "gpus": "2"})


def test_render_refuses_values_that_break_the_script() -> None:
    with pytest.raises(TemplateError, match="'args' contains a line break"):
        render(load_template("single-gpu"), {"args": "--epochs 3\nrm -rf /"})
    # a model tag with a space splits the hint: the rendered script fails the check
    with pytest.raises(TemplateError, match=r"<rendered>:\d+: error: hint elastic"):
        render(load_template("elastic"), {"min_gpus": "4", "max_gpus": "2"})
    with pytest.raises(TemplateError, match="placeholder"):
        render(load_template("single-gpu"), {"model": "{{time}}"})


def test_bad_template_files_are_named_with_line(tmp_path: Path) -> None:
    undeclared = tmp_path / "t1.sbatch"
    undeclared.write_text("#!/bin/bash\n## slurm-ext template: t1\n#SBATCH --time={{time}}\n")
    with pytest.raises(
        TemplateError, match=r"t1.sbatch:3: placeholder \{\{time\}\} is not declared"
    ):
        load_template(str(undeclared))
    malformed = tmp_path / "t2.sbatch"
    malformed.write_text("#!/bin/bash\n## var time 10\n")
    with pytest.raises(TemplateError, match=r"t2.sbatch:2: expected '## var NAME = DEFAULT"):
        load_template(str(malformed))
    unused = tmp_path / "t3.sbatch"
    unused.write_text(
        "#!/bin/bash\n## var time = 10 | limit\n## var x = 1 | unused\n#SBATCH -t {{time}}\n"
    )
    with pytest.raises(TemplateError, match="declared but never used: x"):
        load_template(str(unused))
    with pytest.raises(TemplateError, match="no template 'nope'"):
        load_template("nope")


def test_check_accepts_a_good_script() -> None:
    assert check_script(GOOD) == []


def test_check_reports_missing_essentials() -> None:
    text = "#!/bin/bash\n#SBATCH --job-name=x\nsrun hostname\n"
    assert errors(text) == [
        "0: no #SBATCH --time: the scheduler cannot backfill or rank the job",
        "0: no GPU request (#SBATCH --gres=gpu:N, shard:N, mps:N or --gpus...)",
        "0: no #SBATCH --comment with the suite's hints (at least model=TAG, or slurm_ext=off)",
    ]
    assert "1: the first line must be #! and an interpreter (sbatch refuses the script)" in errors(
        "echo hi\n"
    )


def test_check_reports_bad_hints_with_line_numbers() -> None:
    text = GOOD.replace(
        "model=resnet50 elastic=1-4", "model=resnet50 elastic=4-1 opportunistic=yes"
    )
    assert errors(text) == [
        "4: hint elastic: expected MIN-MAX GPUs, got '4-1'",
        "4: hint opportunistic: expected 0 or 1, got 'yes'",
    ]
    no_model = GOOD.replace("model=resnet50 elastic=1-4", "elastic=1-4").replace(
        "export SLURM_EXT_MODEL=resnet50\n", ""
    )
    assert errors(no_model) == ["4: hints have no model=TAG (add one, or slurm_ext=off to opt out)"]
    assert errors(no_model.replace("elastic=1-4", "slurm_ext=off")) == []
    typo = check_script(GOOD.replace("elastic=1-4", "elastc=1-4"))
    assert [(p.line, p.severity) for p in typo] == [(4, "warning")]
    assert "unknown hint 'elastc'" in typo[0].message
    no_requeue = check_script(GOOD.replace("elastic=1-4", "checkpoint=1"))
    assert [p.format("job.sh") for p in no_requeue] == [
        "job.sh:4: warning: hint checkpoint=1 without #SBATCH --requeue: Slurm will not requeue the job"
    ]
    env_mismatch = GOOD.replace("SLURM_EXT_MODEL=resnet50", "SLURM_EXT_MODEL=vgg16")
    assert errors(env_mismatch) == ["5: SLURM_EXT_MODEL=vgg16 differs from the hint model=resnet50"]


def test_check_reports_unfilled_placeholders_and_late_directives() -> None:
    text = GOOD.replace("--time=01:00:00", "--time={{time}}") + "#SBATCH --gres=gpu:4\n"
    assert errors(text) == [
        "2: unfilled placeholder {{time}}",
        "7: #SBATCH after the first command is ignored by sbatch",
    ]
    assert errors(GOOD.replace("--gres=gpu:2", "--gpus-per-node=2")) == []
    assert errors(GOOD.replace("--gres=gpu:2", "--gres=shard:2")) == []
    assert errors(GOOD.replace("--gres=gpu:2", "--gres=tmpdisk:20")) == [
        "0: no GPU request (#SBATCH --gres=gpu:N, shard:N, mps:N or --gpus...)"
    ]


def test_cli_render_then_check(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "job.sh"
    res = runner.invoke(
        main, ["template", "render", "single-gpu", "--set", "model=vit-b16", "-o", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert '--comment="model=vit-b16"' in out.read_text()
    res = runner.invoke(main, ["template", "check", str(out)])
    assert res.exit_code == 0 and res.output == f"{out}: ok\n"

    res = runner.invoke(main, ["template", "render", "single-gpu", "--set", "nokey"])
    assert res.exit_code == 2 and "'nokey' is not key=value" in res.output
    res = runner.invoke(main, ["template", "render", "single-gpu", "--set", "gpu=2"])
    assert res.exit_code == 1 and "unknown variable(s) gpu" in res.output

    bad = tmp_path / "bad.sh"
    bad.write_text(GOOD.replace("model=resnet50", "model={{model}}"))
    res = runner.invoke(main, ["template", "check", str(bad)])
    assert res.exit_code == 1
    assert f"{bad}:4: error: unfilled placeholder {{{{model}}}}" in res.output

    res = runner.invoke(main, ["template", "list"])
    assert res.exit_code == 0
    for name in SHIPPED:
        assert f"{name}: " in res.output
