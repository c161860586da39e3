"""Hostile `template render --set` values: every shipped template,
every variable, a grid of injection attempts. Each render is refused with the variable
named, or gives a script that bash parses and that, run with Slurm's commands stubbed,
runs no injected command (the values arrive as plain arguments)."""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
from pathlib import Path

import pytest

from slurm_ext.templates.render import TemplateError, load_template, render, template_names

STUB = """#!/bin/sh
# records how it was called, one argument a line, and succeeds
{{ echo "$0"; for a in "$@"; do echo "ARG:$a"; done; }} >> {calls}
exit 0
"""


def hostile(marker: Path) -> list[str]:
    m = shlex.quote(str(marker))
    return [
        f"$(touch {m})",
        f"`touch {m}`",
        f'"; touch {m}; "',
        f"'; touch {m}; '",
        f'x"$(touch {m})"',
        f"a b; touch {m}",
        f"${{IFS}}$(touch {m})",
        f"$((1))$(touch {m})",
        f'\\"; touch {m} #',
        f"x && touch {m}",
        f"| touch {m}",
        f"${{HOME:-$(touch {m})}}",
        f"$'\\x41'; touch {m}",
        f"x; touch {m} & wait",
        f"x > {m}",
        "*",
    ]


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for name in ("python3", "srun", "scontrol", "sbatch"):
        path = stubs / name
        path.write_text(STUB.format(calls=shlex.quote(str(tmp_path / "calls"))))
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "run").mkdir()
    return tmp_path


def run_script(sandbox: Path, script: str) -> subprocess.CompletedProcess:
    path = sandbox / "job.sh"
    path.write_text(script)
    env = {"PATH": f"{sandbox / 'stubs'}:/usr/bin:/bin", "HOME": str(sandbox),
           "TMPDIR": str(sandbox), "SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "node1",
           "SLURM_NNODES": "1", "SLURM_CPUS_ON_NODE": "2", "SLURM_GPUS_ON_NODE": "1"}  # fmt: skip
    return subprocess.run(["bash", str(path)], cwd=sandbox / "run", env=env,
                          capture_output=True, text=True, timeout=30)  # fmt: skip


def test_no_hostile_value_runs_a_command(sandbox: Path) -> None:
    marker = sandbox / "PWNED"
    renders = refused = ran = 0
    injected, unparsable = [], []
    for name in template_names():
        template = load_template(name)
        for var in template.variables:
            for value in hostile(marker):
                renders += 1
                try:
                    script = render(template, {var: value})
                except TemplateError as exc:
                    assert var in str(exc), str(exc)
                    refused += 1
                    continue
                parsed = subprocess.run(["bash", "-n"], input=script, capture_output=True,
                                        text=True, timeout=30)  # fmt: skip
                if parsed.returncode != 0:
                    unparsable.append((name, var, value, parsed.stderr))
                    continue
                run_script(sandbox, script)
                ran += 1
                if marker.exists():
                    injected.append((name, var, value))
                    marker.unlink()
    assert injected == [] and unparsable == []
    assert renders >= 281 and ran >= 50 and refused >= 200, (renders, ran, refused)


def test_words_and_word_values_arrive_as_plain_arguments(sandbox: Path) -> None:
    marker = sandbox / "PWNED"
    args = f"--epochs 3 $(touch {marker}) 'a b' ;"
    script = render(load_template("single-gpu"), {"args": args, "script": "my script.py"})
    run_script(sandbox, script)
    calls = (sandbox / "calls").read_text().splitlines()
    got = [line[4:] for line in calls if line.startswith("ARG:")]
    assert got[:7] == ["my script.py", "--epochs", "3", "$(touch", f"{marker})", "a b", ";"]
    assert not marker.exists()


@pytest.mark.parametrize(
    "name,var,value",
    [("ddp-multinode", "nodes", "abc"), ("single-gpu", "time", "abc"),
     ("ddp-multinode", "gpus_per_node", "-1"), ("ddp-multinode", "gpus_per_node", "0"),
     ("elastic", "global_batch", "1e3"), ("opportunistic", "gpu_mem_fraction", "1.5"),
     ("opportunistic", "share", "gpu:1;x"), ("single-gpu", "mem_per_gpu", "12 G"),
     ("ddp-multinode", "port_base", "65000"), ("single-gpu", "checkpoint_dir", "a b"),
     ("single-gpu", "job_name", "x y")],
)  # fmt: skip
def test_values_of_the_wrong_type_are_refused_naming_the_variable(name, var, value) -> None:
    with pytest.raises(TemplateError, match=rf"{name}: {var}: '.*' is not "):
        render(load_template(name), {var: value})


def test_shell_expansions_in_paths_still_work(sandbox: Path) -> None:
    script = render(
        load_template("single-gpu"),
        {"checkpoint_dir": "ckpt/${SLURM_JOB_ID}-$SLURM_NNODES", "python": "python3"},
    )
    res = run_script(sandbox, script)
    assert res.returncode == 0, res.stderr
    assert (sandbox / "run" / "ckpt" / "77-1").is_dir()


def test_a_template_default_of_the_wrong_type_is_named_with_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "t.sbatch"
    bad.write_text("#!/bin/bash\n## slurm-ext template: t\n## var n: int = two | nodes\n"
                   "#SBATCH --nodes={{n}}\n")  # fmt: skip
    with pytest.raises(TemplateError, match=r"t.sbatch:3: default of n: 'two' is not"):
        load_template(str(bad))
    bad.write_text("#!/bin/bash\n## var n: number = 2 | nodes\n#SBATCH --nodes={{n}}\n")
    with pytest.raises(TemplateError, match=r"t.sbatch:2: unknown type 'number'"):
        load_template(str(bad))


def test_the_stub_sandbox_would_see_an_injection(sandbox: Path) -> None:
    """The detector itself: an unquoted value in a script does run."""
    marker = sandbox / "PWNED"
    run_script(sandbox, f"#!/bin/bash\necho $(touch {shlex.quote(str(marker))})\n")
    assert marker.exists()
    assert os.access(sandbox / "stubs" / "python3", os.X_OK)


# The pattern `path` values were checked with before: the same language, read with
# backtracking that is exponential on values like `$aa$aa...{`.
OLD_PATH = (
    r"(?:[A-Za-z0-9._/%+,:@=~-]|\$[A-Za-z_][A-Za-z0-9_]*|"
    r"\$\{[A-Za-z_][A-Za-z0-9_]*(?::-(?:[A-Za-z0-9._/%+,:@=~-]|\$[A-Za-z_][A-Za-z0-9_]*)*)?\})"
    r"{1,4096}"
)


def test_path_values_are_checked_as_before() -> None:
    """The linear check admits exactly what the old pattern admitted (short values, where
    the old one is still fast)."""
    import random
    import re

    from slurm_ext.templates.types import TYPES

    rng = random.Random(7)
    pieces = ["$", "{", "}", "a", "_", ":", "-", "!", " ", "${a:-", "$a", "a_", "/", ".", "9"]
    for _ in range(20000):
        v = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 9)))
        old = re.fullmatch(OLD_PATH, v) is not None
        assert TYPES["path"].check(v) == old, v
    assert TYPES["path"].check("x" * 4096) and not TYPES["path"].check("x" * 4097)


@pytest.mark.parametrize(
    "value", ["$aa" * 1300 + "{", "${A:-" + "$aa" * 1300 + "{", "$a_" * 1300 + "!"]
)
def test_a_hostile_path_is_refused_at_once(value: str) -> None:
    """Values that took the old pattern minutes (89 characters: 24 s) are refused; run in
    a child bounded at 60 s so that a regression fails instead of hanging the suite."""
    import sys

    code = (
        "import sys; from slurm_ext.templates.types import write_value\n"
        "try:\n    write_value('path', sys.stdin.read())\nexcept ValueError:\n    print('refused')"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], input=value, capture_output=True, text=True, timeout=60
    )
    assert res.stdout.strip() == "refused", res.stderr
