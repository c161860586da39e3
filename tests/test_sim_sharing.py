"""Interference and power models for shared GPUs, on hand-computed cases."""

from __future__ import annotations

import pytest

from slurm_ext.sim.sharing import (
    Interference,
    JobProfile,
    PowerModel,
    ProfileMix,
    busy_fraction,
    memory_fits,
    speeds,
)


def test_two_compute_bound_loops_match_the_h100_reading():
    """docs/nodeagent.md: two 0.99 loops ran 280-380 it/s each, 640-700 summed, against
    690-698 alone, at ~690 W either way. Model: 1/1.98 x (1 - 0.05 x 0.99) = 0.480 each."""
    loop = JobProfile(util=0.99, mem=0.0125)
    a, b = speeds([loop, loop])
    assert a == b == pytest.approx((1 / 1.98) * (1 - 0.05 * 0.99))
    assert 640 / 694 <= a + b <= 700 / 694
    power = PowerModel()
    alone = power.watts(busy_fraction([loop], [1.0]))
    together = power.watts(busy_fraction([loop, loop], [a, b]))
    assert alone == pytest.approx(70 + 620 * 0.99)
    # the pair draws no more than one loop (the GPU was already busy) - and takes twice
    # as long for the same work, so it costs energy rather than saving it
    assert together == pytest.approx(alone, rel=0.06)


def test_light_jobs_pack_with_small_slowdown():
    """0.3 + 0.4 fits: each keeps its share and loses only 0.05 x the other's util."""
    a, b = speeds([JobProfile(0.3, 0.2), JobProfile(0.4, 0.2)])
    assert a == pytest.approx(1 - 0.05 * 0.4) and b == pytest.approx(1 - 0.05 * 0.3)
    assert busy_fraction([JobProfile(0.3, 0.2), JobProfile(0.4, 0.2)], [a, b]) == pytest.approx(
        0.3 * a + 0.4 * b
    )
    assert speeds([JobProfile(0.3, 0.2)]) == [1.0]
    assert speeds([JobProfile(0.3, 0.2)] * 2, Interference(overhead=0.0)) == [1.0, 1.0]
    # three jobs over capacity: demand 1.5, each 1/1.5 x (1 - 0.05 x 1.0)
    three = speeds([JobProfile(0.5, 0.1)] * 3)
    assert three == pytest.approx([(1 / 1.5) * 0.95] * 3)


def test_power_capped_at_board_limit_and_memory_fit():
    p = PowerModel(idle_w=70, busy_w=750, cap_w=700)
    assert p.watts(0.0) == 70 and p.watts(1.0) == 700 and p.watts(2.0) == 700
    assert p.watts(0.5) == pytest.approx(410)
    assert memory_fits([JobProfile(0.5, 0.6), JobProfile(0.5, 0.4)])
    assert not memory_fits([JobProfile(0.5, 0.6), JobProfile(0.5, 0.41)])
    assert not memory_fits([JobProfile(0.5, 0.5), JobProfile(0.5, 0.46)], limit=0.95)


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="util"):
        JobProfile(util=1.2, mem=0.1)
    with pytest.raises(ValueError, match="overhead"):
        Interference(overhead=1.0)
    with pytest.raises(ValueError, match="idle_w"):
        PowerModel(idle_w=800, busy_w=690)


def test_profile_mix_is_seeded_and_stable():
    mix = ProfileMix()
    a = [mix.draw(f"kind{j}", j, seed=1) for j in range(2000)]
    assert a == [mix.draw(f"kind{j}", j, seed=1) for j in range(2000)]
    assert a != [mix.draw(f"kind{j}", j, seed=2) for j in range(2000)]
    heavy = sum(p.util >= 0.85 for p in a) / len(a)
    assert 0.36 < heavy < 0.44
    assert all(0.1 <= p.mem <= 0.5 for p in a)
    # one kind: same memory, utilisation within the jitter of each other
    same = [mix.draw("bert", j, seed=1) for j in range(50)]
    assert len({p.mem for p in same}) == 1
    assert max(p.util for p in same) - min(p.util for p in same) <= 2 * mix.jitter
