"""benchmarks/studies/shapes.py: each shape's trace and cluster are what its row says."""

from benchmarks.studies.shapes import MIXES, SHAPES, one, trace
from benchmarks.studies.targets import runs


def test_shapes_change_what_they_name():
    base = trace(SHAPES["base"], 101)
    assert len(base) == 2000 and len({j.user for j in base}) > 30
    assert {j.gpus for j in trace(SHAPES["wide"], 101)} == {g for g, _ in MIXES["wide"]}
    assert max(j.gpus for j in trace(SHAPES["narrow"], 101)) == 8
    assert len({j.user for j in trace(SHAPES["users5"], 101)}) == 5
    assert not any(j.job_name for j in trace(SHAPES["flat"], 101))  # no kinds
    # the cluster follows the shape, Slurm alone's too
    assert {cl.nodes for _, cl in runs({}, nodes=SHAPES["gpus16"].nodes).values()} == {2}


def test_one_run_finishes_every_job_and_flags_one_offs():
    _, out = one(("oneoff0.9", 102, "np", "{}"))
    jobs = out["jobs"]
    assert len(jobs) == 2000 and out["avg"] > 0
    share = sum(j[3] for j in jobs) / len(jobs)  # one-off kinds: p_oneoff 0.9
    assert 0.85 < share < 0.95
