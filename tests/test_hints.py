"""The job-hints convention: Python parser cases, and the Lua hook's twin on the same cases."""

from __future__ import annotations

import pytest

from slurm_ext.core.hints import Hints, parse_hints
from slurm_ext.predict.lua_check import lua_interpreters, run_driver

# (comment, model, elastic, opportunistic, opt_out, all_off)
CASES = [
    (None, None, None, False, set(), False),
    ("", None, None, False, set(), False),
    ("model=resnet50", "resnet50", None, False, set(), False),
    ("  model=resnet50\telastic=1-4  opportunistic=1 ", "resnet50", (1, 4), True, set(), False),
    ("model=a model=b", "b", None, False, set(), False),  # last wins
    ("free text model=bert-large_v2.1 more text", "bert-large_v2.1", None, False, set(), False),
    ("model=", None, None, False, set(), False),
    ("model=x'y", None, None, False, set(), False),
    ('model=";os.exit(1)--', None, None, False, set(), False),
    ("model=" + "a" * 128, "a" * 128, None, False, set(), False),
    ("model=" + "a" * 129, None, None, False, set(), False),
    ("model=caf\u00e9", None, None, False, set(), False),
    ("model=a\u00a0elastic=1-2", None, None, False, set(), False),  # NBSP is not a separator
    ("model=ok\nelastic=2-8", "ok", (2, 8), False, set(), False),
    ("elastic=4-1", None, None, False, set(), False),
    ("elastic=0-2", None, None, False, set(), False),
    ("elastic=1-1025", None, None, False, set(), False),
    ("elastic=01-0004", None, (1, 4), False, set(), False),
    ("elastic=-1-2", None, None, False, set(), False),
    ("elastic=1-2-3", None, None, False, set(), False),
    ("opportunistic=yes", None, None, False, set(), False),
    ("opportunistic=0", None, None, False, set(), False),
    ("opt_out=cpu", None, None, False, {"cpu"}, False),
    ("opt_out=cpu,gpu,bogus", None, None, False, {"cpu", "gpu"}, False),
    ("opt_out=,,", None, None, False, set(), False),
    ("slurm_ext=off model=x", "x", None, False, set(), True),
    ("slurm_ext=OFF", None, None, False, set(), False),
    ("MODEL=x Model=y =z model", None, None, False, set(), False),
    ("model==x", None, None, False, set(), False),
]


@pytest.mark.parametrize("case", CASES, ids=[repr(c[0])[:40] for c in CASES])
def test_python_parser(case) -> None:
    comment, model, elastic, opp, opt_out, all_off = case
    h = parse_hints(comment)
    assert (h.model, h.elastic, h.opportunistic, set(h.opt_out), h.all_off) == (
        model,
        elastic,
        opp,
        opt_out,
        all_off,
    )


def test_checkpoint_flag() -> None:
    assert parse_hints("model=a checkpoint=1").checkpoint is True
    assert parse_hints("checkpoint=0").checkpoint is False
    h = parse_hints("checkpoint=yes")
    assert h.checkpoint is False and "checkpoint" in " ".join(h.errors)


def test_invalid_values_are_named() -> None:
    h = parse_hints("elastic=4-1 opportunistic=maybe opt_out=ram model=a;b")
    text = " ".join(h.errors)
    for word in ("elastic", "opportunistic", "opt_out", "model"):
        assert word in text
    assert parse_hints("model=ok").errors == ()
    assert Hints().opted_out("cpu") is False
    assert parse_hints("slurm_ext=off").opted_out("gpu") is True


def test_a_lua_interpreter_is_installed() -> None:
    assert lua_interpreters(), "install lua5.3 (scripts/install-deps.sh) or lua5.1 to test the hook"


@pytest.mark.parametrize("lua", lua_interpreters())
def test_lua_parser_agrees(lua: str) -> None:
    out = run_driver(lua, [("hints", c[0] if c[0] is not None else None) for c in CASES])
    for case, got in zip(CASES, out):
        h = parse_hints(case[0])
        elastic = f"{h.elastic[0]}-{h.elastic[1]}" if h.elastic else "-"
        want = [
            h.model if h.model is not None else "-",
            elastic,
            "1" if h.opportunistic else "0",
            ",".join(sorted(h.opt_out)) or "-",
            "1" if h.all_off else "0",
        ]
        got = [g if g is not None else "-" for g in got]
        assert got == want, f"{lua} disagrees on {case[0]!r}"
