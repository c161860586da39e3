"""The files shipped from etc/ (package data) and how they are written out."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from slurm_ext.core.resources import shipped_file, shipped_names, write_file

ETC = Path(__file__).resolve().parents[1] / "etc"


def test_every_file_of_etc_is_shipped() -> None:
    # pyproject.toml's package-data globs name etc/* and etc/traces/*: a file anywhere
    # else under etc/ would be missing from the wheel.
    in_tree = sorted(str(p.relative_to(ETC)) for p in ETC.rglob("*") if p.is_file())
    assert shipped_names() == in_tree
    assert shipped_file("job_submit.lua").read_text() == (ETC / "job_submit.lua").read_text()


@pytest.mark.parametrize("name", ["../pyproject.toml", "traces", "/etc/passwd", "nope.toml"])
def test_only_shipped_names_are_served(name: str) -> None:
    with pytest.raises(KeyError, match="is not a shipped file"):
        shipped_file(name)


def test_write_file_refuses_to_replace_unless_forced(tmp_path: Path) -> None:
    path = tmp_path / "job_submit.lua"
    write_file(path, "one\n")
    assert path.read_text() == "one\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # slurmctld (SlurmUser) reads it
    with pytest.raises(FileExistsError, match="--force"):
        write_file(path, "two\n")
    assert path.read_text() == "one\n"
    write_file(path, "two\n", force=True, mode=0o600)
    assert path.read_text() == "two\n" and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job_submit.lua"]  # no temp left


def test_write_file_into_a_missing_directory_fails_cleanly(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_file(tmp_path / "missing" / "x.toml", "a = 1\n")
    assert list(tmp_path.iterdir()) == []
