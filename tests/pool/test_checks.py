"""Freivalds' check and result agreement, against exact products (numpy integers) and stated bounds."""
from __future__ import annotations

import numpy as np

from scellis_jupyter.pool.checks import agree, false_accept_bound, freivalds, spot_pick


def test_freivalds_accepts_the_true_product_and_rejects_a_perturbed_one():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((40, 30)), rng.standard_normal((30, 20))
    c = a @ b
    assert freivalds(a, b, c, rounds=20)
    bad = c.copy(); bad[7, 3] += 1e-3
    assert not freivalds(a, b, bad, rounds=20)
    assert not freivalds(a, b, c[:, :-1], rounds=20)           # wrong shape
    assert not freivalds(a, b, "garbage", rounds=20)
    assert false_accept_bound(20) == 2.0 ** -20


def test_one_round_false_accept_rate_is_at_most_one_half():
    # integers: exact arithmetic, so one round accepts a wrong C with probability <= 1/2 (here exactly 1/2:
    # a single wrong entry is missed exactly when its column's r entry is 0)
    rng = np.random.default_rng(1)
    a, b = rng.integers(-5, 5, (8, 8)), rng.integers(-5, 5, (8, 8))
    bad = a @ b; bad[2, 5] += 1
    trials = 2000
    accepted = sum(freivalds(a, b, bad, rounds=1, tol=0.0) for _ in range(trials))
    assert abs(accepted / trials - 0.5) < 0.05                  # > 4 sigma of Binomial(2000, 0.5)
    assert sum(freivalds(a, b, bad, rounds=3, tol=0.0) for _ in range(trials)) / trials < 0.125 + 0.03


def test_agree_is_structural_and_within_tolerance():
    assert agree({"a": [1.0, np.ones(3)]}, {"a": [1.0 + 1e-9, np.ones(3)]}, 1e-6)
    assert not agree({"a": 1.0}, {"a": 1.1}, 1e-6)
    assert not agree(np.ones(3), np.ones(4), 1e-6)
    assert not agree({"a": 1.0}, {"b": 1.0}, 1e-6)
    assert not agree(np.array([1.0, np.nan]), np.array([1.0, 2.0]), 1e-6)
    assert not agree("x", 1.0, 1e-6)


def test_spot_pick_rate():
    n = 4000
    assert abs(sum(spot_pick(0.25) for _ in range(n)) / n - 0.25) < 0.03
    assert not any(spot_pick(0.0) for _ in range(100)) and all(spot_pick(1.0) for _ in range(100))
