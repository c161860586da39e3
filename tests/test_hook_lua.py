"""The Lua hook outside slurmctld (lua5.1 as Slurm links, and lua5.3): same answers as Python."""

from __future__ import annotations

import pytest

from slurm_ext.predict.hook import render_hook
from slurm_ext.predict.lua_check import lua_interpreters, run_driver
from slurm_ext.predict.rewrite import HookConfig, JobRequest, plan_rewrite
from slurm_ext.predict.table import HEADER, TableRow, parse_table, render_table

TABLE = render_table(
    [
        TableRow("resnet50", "v100", 7),
        TableRow("resnet50", "*", 6),
        TableRow("overfeat", "*", 38),
        TableRow("bert", "*", 5, gpus=3),
        TableRow("alice/train.sh", "*", 9),
    ]
)
HOSTILE_TABLE = (
    "\n".join(
        [
            HEADER,
            "resnet50\t*\t6\t0",
            'x");os.exit(1)--\t*\t4\t0',
            "]]os.execute('id')[[\t*\t4\t0",
            "big\t*\t99999999999999999999\t0",
            "neg\t*\t-4\t0",
            "tab\tin\tkey\t4\t0",
            "nl\t*\t4\t0\r",
            "resnet50\t*\t1\t0",
        ]
    )
    + "\n# end 8\n"
)
TABLES = {
    "good": TABLE,
    "hostile": HOSTILE_TABLE,
    "no-header": TABLE.replace(HEADER, "# something else"),
    "truncated": TABLE[: len(TABLE) // 2],
    "empty": "",
    "binary": "\x00\xff\x01" * 100,
}
JOBS = [
    JobRequest(comment="model=resnet50", tres_per_node="gres:gpu:1"),
    JobRequest(comment="model=resnet50", tres_per_node="gres:gpu:v100:2"),
    JobRequest(comment="model=resnet50", tres_per_node="gres:gpu:a100:2"),
    JobRequest(comment="model=resnet50", tres_per_job="gres:gpu:4"),
    JobRequest(comment="model=overfeat", tres_per_node="gres:gpu:2", max_cpus_per_node=16),
    JobRequest(comment="model=overfeat", tres_per_node="gres:gpu:1", max_cpus_per_node=4294967295),
    JobRequest(comment="model=overfeat", tres_per_node="gres:gpu:3", max_cpus_per_node=16),
    JobRequest(comment="model=resnet50 opt_out=cpu", tres_per_node="gres:gpu:1"),
    JobRequest(comment="model=resnet50 slurm_ext=off", tres_per_node="gres:gpu:1"),
    JobRequest(comment="model=resnet50", tres_per_node="gres:gpu:1", cpus_per_tres="gres:gpu:3"),
    JobRequest(comment="model=resnet50", tres_per_node="gres:gpu:1", cpus_per_task=4),
    JobRequest(comment="model=resnet50", tres_per_node="gres:gpu:1", cpus_per_task=65534),
    # --exclusive (shared 0): CPUs left alone, the GPU count still elastic; other sharing kept
    JobRequest(comment="model=resnet50", tres_per_node="gres:gpu:1", shared=0),
    JobRequest(comment="model=bert elastic=1-4", tres_per_node="gres:gpu:1", shared=0),
    JobRequest(comment="model=resnet50", tres_per_node="gres:gpu:1", shared=1),
    JobRequest(comment="model=resnet50", tres_per_node="gres:gpu:1", shared=65534),
    JobRequest(comment="model=bert elastic=1-4", tres_per_node="gres:gpu:1"),
    JobRequest(comment="model=bert elastic=1-2", tres_per_node="gres:gpu:v100:1"),
    JobRequest(comment="model=bert elastic=1-4 opt_out=gpu", tres_per_node="gres:gpu:1"),
    JobRequest(comment="model=bert elastic=1-4", tres_per_job="gres:gpu:1"),
    JobRequest(name="train.sh", user_name="alice", tres_per_node="gres:gpu:1"),
    JobRequest(name="train me", user_name="alice", tres_per_node="gres:gpu:1"),
    JobRequest(comment="model=unknown", tres_per_node="gres:gpu:1"),
    JobRequest(comment="model=resnet50"),
    JobRequest(comment="model=resnet50", tres_per_node="gres:gpu:0"),
    JobRequest(comment="model=resnet50", tres_per_node="gres:gpu"),
    JobRequest(comment="model=resnet50", tres_per_node="gres:gpu:1,gres:gpu:v100:1"),
    JobRequest(comment="model=resnet50", tres_per_node="gres:gpu:x:y:1"),
    JobRequest(comment="model=resnet50", tres_per_node="gres:mps:100,gres:gpu:2"),
    JobRequest(comment="model=resnet50", tres_per_node="gres:gpu:1", cpus_per_tres="gres:gpu:6"),
    # the spellings of 23.02+ (25.11 hands the hook these) and --gpus-per-task
    JobRequest(comment="model=resnet50", tres_per_node="gres/gpu:2"),
    JobRequest(comment="model=resnet50", tres_per_node="gres/gpu:v100:2"),
    JobRequest(comment="model=resnet50", tres_per_job="gres/gpu:3", max_cpus_per_node=16),
    JobRequest(comment="model=resnet50", tres_per_task="gres/gpu=1", num_tasks=2),
    JobRequest(comment="model=resnet50", tres_per_task="gres/gpu:v100=1", num_tasks=4294967294),
    JobRequest(comment="model=overfeat", tres_per_task="gres:gpu:1", num_tasks=3, max_cpus_per_node=16),
    JobRequest(comment="model=overfeat", tres_per_node="gres/gpu:4", max_cpus_per_node=16),
    JobRequest(comment="model=overfeat", tres_per_job="gres/gpu:8", max_cpus_per_node=16),
    JobRequest(comment="model=bert elastic=1-8", tres_per_node="gres/gpu:1", max_cpus_per_node=16),
    JobRequest(comment="model=bert elastic=6-8", tres_per_node="gres/gpu:1"),
    JobRequest(comment="model=resnet50", tres_per_node="gres/gpu"),
    JobRequest(comment="model=resnet50", tres_per_node="gres/gpu:x=y"),
    JobRequest(comment="model=resnet50", tres_per_node="gres/gpus:2"),
    JobRequest(comment="model=resnet50", tres_per_node="gres/gpu:5000"),
]  # fmt: skip
CONFS = [
    HookConfig(),
    HookConfig(respect_explicit_cpus=False, max_cpus_per_gpu=5),
    HookConfig(gpus_per_node=4),
]


def _case(table: str, job: JobRequest, conf: HookConfig) -> tuple:
    return (
        "plan", table, job.comment, job.name, job.user_name, job.tres_per_node, job.tres_per_job,
        job.cpus_per_tres, job.cpus_per_task, job.max_cpus_per_node,
        "1" if conf.respect_explicit_cpus else "0", conf.max_cpus_per_gpu, conf.gpus_per_node,
        job.tres_per_task, job.num_tasks, job.shared,
    )  # fmt: skip


@pytest.mark.parametrize("lua", lua_interpreters())
def test_plan_agrees_with_python(lua: str) -> None:
    cases, want = [], []
    for table in TABLES.values():
        parsed = parse_table(table)
        for job in JOBS:
            for conf in CONFS:
                cases.append(_case(table, job, conf))
                rw = plan_rewrite(job, parsed, conf)
                want.append(
                    [rw.changes.get("tres_per_node"), rw.changes.get("cpus_per_tres"), rw.note]
                )
    got = [ans[:3] for ans in run_driver(lua, cases)]
    for case, g, w in zip(cases, got, want):
        assert g == w, f"{lua}: {case[2:]!r}"
    changed = sum(1 for w in want if w[2])
    assert changed >= 20  # the cases do exercise rewriting, not only fail-open paths


@pytest.mark.parametrize("lua", lua_interpreters())
def test_table_reader_agrees_with_python(lua: str) -> None:
    texts = list(TABLES.values())
    answers = run_driver(lua, [("table", t) for t in texts])
    for text, (got,) in zip(texts, answers):
        parsed = parse_table(text)
        want = (
            ";".join(
                sorted(
                    f"{r.key}|{r.gpu_type}|{r.cpus_per_gpu}|{r.gpus}" for r in parsed.rows.values()
                )
            )
            if parsed.valid
            else "INVALID"
        )
        assert got == want


def test_expected_rewrites() -> None:
    """Spot checks of the Python plan (the Lua one is checked equal above)."""
    good = parse_table(TABLE)

    def changes(conf: HookConfig = CONFS[0], **job: object) -> dict[str, str]:
        return plan_rewrite(JobRequest(**job), good, conf).changes  # type: ignore[arg-type]

    gpu1 = "gres:gpu:1"
    assert changes(comment="model=resnet50", tres_per_node=gpu1) == {"cpus_per_tres": "gres:gpu:6"}
    assert changes(comment="model=resnet50", tres_per_node="gres:gpu:v100:2") == {
        "cpus_per_tres": "gres:gpu:7"
    }
    capped = JobRequest(comment="model=overfeat", tres_per_node="gres:gpu:2", max_cpus_per_node=16)
    rw = plan_rewrite(capped, good, CONFS[0])
    assert rw.changes == {"cpus_per_tres": "gres:gpu:8"} and "capped from 38" in rw.note
    assert changes(comment="model=bert elastic=1-4", tres_per_node=gpu1) == {
        "tres_per_node": "gres:gpu:3",
        "cpus_per_tres": "gres:gpu:5",
    }
    assert (
        changes(comment="model=bert elastic=1-2", tres_per_node="gres:gpu:v100:1")["tres_per_node"]
        == "gres:gpu:v100:2"
    )
    assert changes(name="train.sh", user_name="alice", tres_per_node=gpu1) == {
        "cpus_per_tres": "gres:gpu:9"
    }
    for job in (
        dict(comment="model=resnet50 opt_out=cpu", tres_per_node=gpu1),
        dict(comment="model=resnet50 slurm_ext=off", tres_per_node=gpu1),
        dict(comment="model=resnet50", tres_per_node=gpu1, cpus_per_tres="gres:gpu:3"),
        dict(comment="model=resnet50", tres_per_node=gpu1, cpus_per_task=4),
        dict(comment="model=unknown", tres_per_node=gpu1),
        dict(name="train me", user_name="alice", tres_per_node=gpu1),
        dict(comment="model=resnet50"),
    ):
        assert changes(**job) == {}, job
    explicit = dict(comment="model=resnet50", tres_per_node=gpu1, cpus_per_tres="gres:gpu:3")
    assert changes(CONFS[1], **explicit) == {"cpus_per_tres": "gres:gpu:5"}
    # 23.02+ spellings are read and written back in the same spelling
    assert changes(comment="model=resnet50", tres_per_node="gres/gpu:2") == {
        "cpus_per_tres": "gres/gpu:6"
    }
    assert changes(comment="model=resnet50", tres_per_task="gres/gpu=1", num_tasks=2) == {
        "cpus_per_tres": "gres/gpu:6"
    }
    assert changes(comment="model=resnet50", tres_per_task="gres/gpu:v100=1") == {
        "cpus_per_tres": "gres/gpu:7"
    }
    # --exclusive: the job has every core of its nodes; a CPU count per GPU only made Slurm
    # refuse it ("Requested node configuration is not available")
    assert changes(comment="model=resnet50", tres_per_node="gres:gpu:1", shared=0) == {}
    assert changes(comment="model=resnet50", tres_per_node="gres:gpu:1", shared=1) == {
        "cpus_per_tres": "gres:gpu:6"
    }
    # caps by what one node has: 3 tasks x 1 GPU on 16 CPUs -> 5 each; 8 GPUs on 4-GPU nodes
    rw = plan_rewrite(
        JobRequest(comment="model=overfeat", tres_per_task="gres:gpu:1", num_tasks=3, max_cpus_per_node=16),
        good,
        CONFS[0],
    )  # fmt: skip
    assert rw.changes == {"cpus_per_tres": "gres:gpu:5"}
    wide = JobRequest(comment="model=overfeat", tres_per_job="gres/gpu:8", max_cpus_per_node=16)
    assert plan_rewrite(wide, good, CONFS[0]).changes == {"cpus_per_tres": "gres/gpu:2"}
    assert plan_rewrite(wide, good, CONFS[2]).changes == {"cpus_per_tres": "gres/gpu:4"}
    elastic = JobRequest(
        comment="model=bert elastic=1-8", tres_per_node="gres/gpu:1", max_cpus_per_node=16
    )
    assert plan_rewrite(elastic, good, CONFS[2]).changes == {
        "tres_per_node": "gres/gpu:3",
        "cpus_per_tres": "gres/gpu:5",
    }
    big = parse_table(render_table([TableRow("bert", "*", 4, gpus=8)]))
    assert plan_rewrite(elastic, big, CONFS[2]).changes == {
        "tres_per_node": "gres/gpu:4",
        "cpus_per_tres": "gres/gpu:4",
    }
    beyond = JobRequest(comment="model=bert elastic=6-8", tres_per_node="gres/gpu:1")
    assert "tres_per_node" not in plan_rewrite(beyond, big, CONFS[2]).changes
    for tres in ("gres/gpu", "gres/gpu:x=y", "gres/gpu:5000"):
        assert changes(comment="model=resnet50", tres_per_node=tres) == {}, tres
    hostile = parse_table(HOSTILE_TABLE)
    assert hostile.valid and list(hostile.rows) == [("resnet50", "*")]


@pytest.mark.parametrize("lua", lua_interpreters())
def test_lua_error_fails_open_with_one_log_line(lua: str, tmp_path) -> None:
    table = tmp_path / "t.tsv"
    table.write_text(TABLE)
    hook = render_hook(table)
    [(rc, n_logged, line)] = run_driver(lua, [("submit_error",)], hook_source=hook)
    assert rc == "0" and n_logged == "1" and "hook error" in line and "boom" in line


@pytest.mark.parametrize("lua", lua_interpreters())
def test_log_line_prints_the_uid_as_an_integer(lua: str, tmp_path) -> None:
    hook = render_hook(tmp_path / "missing.tsv")
    [(line,)] = run_driver(lua, [("submit_uid", "1000")], hook_source=hook)
    assert line.startswith("slurm-ext hook uid=1000: unchanged"), line


def test_render_hook_refuses_unsafe_settings() -> None:
    for bad in ('/x"; os.exit(1) --', "relative/path", "/a b", "/a\nb"):
        with pytest.raises(ValueError, match="table_path"):
            render_hook(bad)
    for bad_gpus in (-1, 1025, True, "4"):
        with pytest.raises(ValueError, match="gpus_per_node"):
            render_hook("/srv/t.tsv", gpus_per_node=bad_gpus)  # type: ignore[arg-type]
    src = render_hook(
        "/srv/t.tsv", respect_explicit_cpus=False, max_cpus_per_gpu=8, gpus_per_node=4
    )
    assert 'local TABLE_PATH = "/srv/t.tsv"\n' in src and "local MAX_CPUS_PER_GPU = 8\n" in src
    assert "local GPUS_PER_NODE = 4\n" in src
