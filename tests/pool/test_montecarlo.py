"""Monte-Carlo on a Pool: draws from the Philox stream by sample index, so the estimate is the same on 1 or 2
workers (bit for bit) and over any shard count (within 1e-12: float64 combination order), equals a direct
numpy float64 computation over the same draws, and lands within its stated standard error of the truth."""
from __future__ import annotations

import math

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.pool import Pool
from scellis_jupyter.pool.montecarlo import draws, sample_ranges, simulate, simulate_job
from scellis_jupyter.rng.philox import bits_to_uniform, stream_bits, stream_key

N = 60_000


def quarter_circle(u):
    return 4.0 * ((u[:, 0] ** 2 + u[:, 1] ** 2) < 1.0)


def moments(u):                                  # two outputs per sample: E[U] = 1/2, E[U^2] = 1/3
    return np.stack([u[:, 0], u[:, 0] ** 2], axis=1)


def test_draws_are_the_stream_words_by_sample_index():
    whole = bits_to_uniform(stream_bits(stream_key(5, "mc"), 0, 3 * 100)).reshape(100, 3)
    np.testing.assert_array_equal(draws(5, "mc", 40, 70, 3), whole[40:70])


def test_pi_is_within_its_standard_error_and_matches_numpy(pool):
    r = simulate(pool, quarter_circle, N, k=2, seed=11, shards=6).value
    v = quarter_circle(draws(11, "montecarlo", 0, N, 2))          # the same draws, one numpy pass
    assert r["n"] == N
    assert r["mean"] == pytest.approx(v.mean(), rel=1e-12)
    assert r["var"] == pytest.approx(v.var(ddof=1), rel=1e-10)
    assert abs(r["mean"] - math.pi) < 4 * r["stderr"]             # a 4-sigma band around the truth
    assert r["stderr"] == pytest.approx(math.sqrt(v.var(ddof=1) / N), rel=1e-10)


def test_independent_of_worker_count_and_of_shard_count(pool):
    with Pool(workers=1, processes=False) as one:
        a = simulate(one, moments, N, k=1, seed=2, shards=5).value
    b = simulate(pool, moments, N, k=1, seed=2, shards=5).value
    np.testing.assert_array_equal(a["mean"], b["mean"])
    np.testing.assert_array_equal(a["var"], b["var"])
    c = simulate(pool, moments, N, k=1, seed=2, shards=13).value
    np.testing.assert_allclose(c["mean"], b["mean"], rtol=1e-12)
    np.testing.assert_allclose(b["mean"], [0.5, 1 / 3], atol=4 * b["stderr"].max())


def test_a_simulation_verified_by_re_execution(pool):
    r = pool.run(simulate_job(quarter_circle, 8_000, k=2, seed=1, shards=4, verify="reference"))
    assert r.checked == 4 and not r.rejected


def test_bad_simulations_are_refused(pool):
    with pytest.raises(sc.PoolError, match="shards"):
        sample_ranges(10, 11)
    with pytest.raises(sc.PoolError, match="shape"):
        simulate(pool, lambda u: u[:1], 100, k=1, shards=2)
