"""The recurring-users trace model (sim/users.py) and its CSV round trip."""

import hashlib
import math
import statistics
from collections import Counter, defaultdict

import pytest

from slurm_ext.sim.synth import (
    GPU_CHOICES,
    MAX_S,
    MIN_S,
    SIGMA,
    synth_jobs,
    write_tiresias_csv,
)
from slurm_ext.sim.traces import read_trace
from slurm_ext.sim.users import UserModel, synth_user_jobs

JOBS = synth_user_jobs(6000, 64, load=1.0, seed=3)


def test_users_resubmit_their_kinds():
    kinds = Counter((j.user, j.job_name) for j in JOBS)
    recurring = sum(c for c in kinds.values() if c > 1) / len(JOBS)
    assert 0.85 <= recurring <= 0.95  # p_oneoff 0.1: one-off kinds appear once
    users = Counter(j.user for j in JOBS)
    top = users.most_common(4)
    assert sum(c for _, c in top) / len(JOBS) > 0.4  # Zipf-like: a few heavy users
    # a kind keeps its GPU count, model, time limit and checkpoint flag
    for key in kinds:
        rows = [j for j in JOBS if (j.user, j.job_name) == key][:5]
        assert len({(j.gpus, j.model_tag, j.time_limit_s, j.checkpoint) for j in rows}) == 1


def test_run_times_cluster_around_a_kind_median():
    by = defaultdict(list)
    for j in JOBS:
        by[(j.user, j.job_name)].append(math.log(j.duration_s))
    big = [v for v in by.values() if len(v) >= 30]
    assert len(big) >= 10
    within = statistics.mean(statistics.pstdev(v) for v in big)
    spread = statistics.pstdev(math.log(j.duration_s) for j in JOBS)
    # sigma_within 1.0 (less where clipped at 1 min / the limit); the population ~2.15
    assert 0.6 < within < 1.1 < 1.6 < spread <= SIGMA + 0.1
    medians = sorted(statistics.median(v) for v in big)
    assert medians[-1] - medians[0] > math.log(20)  # kinds differ by orders of magnitude


def test_limits_cover_run_times_and_are_round():
    assert all(MIN_S <= j.duration_s <= min(MAX_S, j.time_limit_s) for j in JOBS)
    limits = Counter(j.time_limit_s for j in JOBS)
    assert len(limits) <= 12  # modal round values (and the partition maximum)
    timeouts = sum(j.duration_s == j.time_limit_s for j in JOBS)
    assert 0 < timeouts < 0.05 * len(JOBS)  # a few jobs run into their limit
    share = sum(j.checkpoint for j in JOBS) / len(JOBS)
    assert 0.3 < share < 0.7  # p_checkpoint 0.5, per kind


def test_seeded_and_offered_load():
    assert synth_user_jobs(200, 64, seed=1) == synth_user_jobs(200, 64, seed=1)
    assert synth_user_jobs(200, 64, seed=1) != synth_user_jobs(200, 64, seed=2)
    work = sum(j.gpus * j.duration_s for j in JOBS)
    span = JOBS[-1].submit_time - JOBS[0].submit_time
    assert work / (64 * span) == pytest.approx(1.0, rel=0.1)
    with pytest.raises(ValueError, match="p_oneoff"):
        synth_user_jobs(10, 8, model=UserModel(p_oneoff=1.5))


def test_tiresias_csv_carries_user_name_limit_checkpoint(tmp_path):
    path = tmp_path / "t.csv"
    write_tiresias_csv(JOBS[:50], path)
    back = read_trace(path).jobs
    key = lambda j: (j.job_id, j.user, j.job_name, j.time_limit_s, j.checkpoint, j.gpus)  # noqa: E731
    assert [key(j) for j in back] == [key(j) for j in JOBS[:50]]
    assert any(j.checkpoint for j in back) and all(j.time_limit_s for j in back)


# sha256 (first 16 hex) of each job's fields, from the generators before `gpu_choices`
USERS_300_SEED3, FLAT_300_SEED3 = "ff54d7160d8f7f0e", "3673f3738de0f9f2"


def _fingerprint(jobs) -> str:
    rows = [(j.gpus, j.submit_time, j.duration_s, j.user, j.job_name, j.time_limit_s) for j in jobs]
    return hashlib.sha256(repr(rows).encode()).hexdigest()[:16]


def test_default_traces_unchanged_by_the_width_knob():
    """The tuning sets' traces stay byte-identical: pinned from before `gpu_choices`."""
    assert _fingerprint(synth_user_jobs(300, 64, load=1.1, seed=3)) == USERS_300_SEED3
    assert _fingerprint(synth_jobs(300, 64, load=1.1, seed=3)) == FLAT_300_SEED3
    same = synth_user_jobs(300, 64, load=1.1, seed=3, gpu_choices=GPU_CHOICES)
    assert same == synth_user_jobs(300, 64, load=1.1, seed=3)


@pytest.mark.parametrize("flat", [False, True])
def test_width_mix_knob(flat):
    mix = ((2, 0.25), (8, 0.75))
    gen = synth_jobs if flat else synth_user_jobs
    jobs = gen(2000, 64, 1.0, 5, gpu_choices=mix)
    widths = Counter(j.gpus for j in jobs)
    assert set(widths) == {2, 8}
    # per job (flat) or per kind (users): the 8-GPU share near 0.75 either way
    assert 0.55 < widths[8] / len(jobs) < 0.95
    work = sum(j.gpus * j.duration_s for j in jobs)
    span = jobs[-1].submit_time - jobs[0].submit_time
    assert work / (64 * span) == pytest.approx(1.0, rel=0.15)  # the load still holds
    for bad in ((), ((0, 1.0),), ((4, -1.0),), ((4, 0.0),)):
        with pytest.raises(ValueError, match="gpu_choices"):
            gen(10, 8, gpu_choices=bad)
