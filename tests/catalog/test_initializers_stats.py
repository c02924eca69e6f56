"""Initializer entries against their formulas, drawn from the Philox init stream.

Statistics on large shapes (~200k elements): the sample mean within 3 standard errors of the formula's
mean and the sample variance within 3 standard errors (estimated from the sample's fourth moment) of the
formula's variance; uniform laws also stay inside and reach to 0.99 of their bounds. Orthogonal:
W W^T = I (or W^T W = I) to 1e-5, and the sign fix checked by the mean trace of many 8x8 draws (0 for a
Haar matrix; about -0.2 without the fix) within 3 standard errors. Truncated normal: inside [a, b], mean
and variance against scipy.stats.truncnorm within 3 standard errors. Sparse: the number of zeros per column
exact. gain against torch.nn.init.calculate_gain (1e-15). Bits: same seed -> identical bits; values equal
the Philox words turned into numbers by the entry's formula; positions advance by the words used and a
generator restored at a recorded position continues exactly.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from scellis_jupyter import catalog
from scellis_jupyter.catalog.initializers import gain
from scellis_jupyter.rng import Generator
from scellis_jupyter.rng.philox import bits_to_uniform, stream_bits, stream_key

BIG = (512, 384)                  # fan_in 384, fan_out 512


def draw(name, shape=BIG, fan_in=None, fan_out=None, seed=0, **hyper):
    fan_in = fan_in if fan_in is not None else (math.prod(shape[1:]) if len(shape) > 1 else shape[0])
    fan_out = fan_out if fan_out is not None else (shape[0] * math.prod(shape[2:]) if len(shape) > 1 else shape[0])
    s = Generator(seed).stream("init")
    out = catalog.make("initializer", name, **hyper)(shape, fan_in, fan_out, s, name="w")
    assert out.dtype == np.float32 and out.shape == tuple(shape)
    return out, s.position


def assert_moments(x, mean, var):
    x = np.asarray(x, np.float64).ravel()
    n = x.size
    m = x.mean()
    se_mean = math.sqrt(var / n)
    assert abs(m - mean) < 3 * se_mean, (m, mean, se_mean)
    d2 = (x - m) ** 2
    se_var = math.sqrt(d2.var() / n)
    assert abs(d2.mean() - var) < 3 * se_var, (d2.mean(), var, se_var)


# ---- variance scaling ---------------------------------------------------------------------------------
@pytest.mark.parametrize("g", [1.0, 5.0 / 3.0])
def test_xavier(g):
    fi, fo = BIG[1], BIG[0]
    x, _ = draw("xavier_uniform", gain=g)
    bound = g * math.sqrt(6.0 / (fi + fo))
    assert np.abs(x).max() <= bound and np.abs(x).max() > 0.99 * bound
    assert_moments(x, 0.0, bound ** 2 / 3)
    x, _ = draw("xavier_normal", gain=g)
    assert_moments(x, 0.0, g ** 2 * 2.0 / (fi + fo))


@pytest.mark.parametrize("mode,nonlin,a", [("fan_in", "leaky_relu", 0.0), ("fan_out", "relu", 0.0),
                                           ("fan_in", "leaky_relu", 0.2), ("fan_out", "tanh", 0.0),
                                           ("fan_in", "linear", 0.0)])
def test_kaiming(mode, nonlin, a):
    torch = pytest.importorskip("torch")
    fan = BIG[1] if mode == "fan_in" else BIG[0]
    std = torch.nn.init.calculate_gain(nonlin, a) / math.sqrt(fan)
    x, _ = draw("kaiming_uniform", a=a, mode=mode, nonlinearity=nonlin)
    bound = math.sqrt(3.0) * std
    assert np.abs(x).max() <= bound * (1 + 1e-6) and np.abs(x).max() > 0.99 * bound
    assert_moments(x, 0.0, std ** 2)
    x, _ = draw("kaiming_normal", a=a, mode=mode, nonlinearity=nonlin)
    assert_moments(x, 0.0, std ** 2)


def test_kaiming_on_a_conv_weight_uses_the_given_fans():
    x, _ = draw("kaiming_normal", (64, 32, 3, 3), fan_in=288, fan_out=576, nonlinearity="relu")
    assert_moments(x, 0.0, 2.0 / 288)
    x, _ = draw("kaiming_normal", (64, 32, 3, 3), fan_in=288, fan_out=576, nonlinearity="relu", mode="fan_out")
    assert_moments(x, 0.0, 2.0 / 576)


def test_gain_matches_torch():
    torch = pytest.importorskip("torch")
    for n in ["linear", "conv1d", "conv2d", "conv3d", "conv_transpose2d", "sigmoid", "tanh", "relu", "leaky_relu",
              "selu"]:
        assert gain(n) == pytest.approx(torch.nn.init.calculate_gain(n), rel=1e-15)
    assert gain("leaky_relu", 0.2) == pytest.approx(torch.nn.init.calculate_gain("leaky_relu", 0.2), rel=1e-15)
    with pytest.raises(catalog.CatalogError, match="did you mean 'leaky_relu'"):
        gain("leaky_rel")


def test_zero_fan_is_a_clear_error():
    s = Generator(0).stream("init")
    with pytest.raises(catalog.CatalogError, match=r"fan_in is 0 .*\(3, 0\)"):
        catalog.make("initializer", "kaiming_uniform")((3, 0), 0, 3, s)


# ---- orthogonal ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(64, 48), (48, 64), (32, 32), (16, 4, 3, 3)])
def test_orthogonal(shape):
    w, _ = draw("orthogonal", shape)
    m = w.reshape(shape[0], -1).astype(np.float64)
    gram = m @ m.T if m.shape[0] <= m.shape[1] else m.T @ m
    np.testing.assert_allclose(gram, np.eye(gram.shape[0]), atol=1e-5)
    w2, _ = draw("orthogonal", shape, gain=2.0)
    m2 = w2.reshape(shape[0], -1).astype(np.float64)
    np.testing.assert_allclose(m2 @ m2.T if m.shape[0] <= m.shape[1] else m2.T @ m2, 4 * np.eye(gram.shape[0]),
                               atol=4e-5)


def test_orthogonal_is_haar_by_its_sign_fix():
    init = catalog.make("initializer", "orthogonal")
    s = Generator(3).stream("init")
    traces = np.array([np.trace(init((8, 8), 8, 8, s)) / 8 for _ in range(1000)], np.float64)
    assert abs(traces.mean()) < 3 * traces.std() / math.sqrt(traces.size)


def test_orthogonal_refuses_a_vector():
    s = Generator(0).stream("init")
    with pytest.raises(catalog.CatalogError, match=r"b\.bias.*\(7,\)"):
        catalog.make("initializer", "orthogonal")((7,), 7, 7, s, name="b.bias")


# ---- truncated normal, sparse, plain laws ---------------------------------------------------------------
@pytest.mark.parametrize("mean,std,a,b", [(0.0, 1.0, -2.0, 2.0), (1.0, 2.0, 0.0, 3.0), (0.0, 1.0, 2.5, 4.0),
                                          (0.0, 0.02, -0.04, 0.04)])
def test_truncated_normal(mean, std, a, b):
    x, pos = draw("truncated_normal", mean=mean, std=std, a=a, b=b)
    assert x.min() >= np.float32(a) and x.max() <= np.float32(b)
    alpha, beta = (a - mean) / std, (b - mean) / std
    want_mean = stats.truncnorm.mean(alpha, beta, loc=mean, scale=std)
    want_var = stats.truncnorm.var(alpha, beta, loc=mean, scale=std)
    assert_moments(x, want_mean, want_var)
    assert pos == 2 * x.size                        # 53-bit uniforms: two words per element


def test_truncated_normal_bad_bounds():
    with pytest.raises(catalog.CatalogError, match="a=1.0 must be below b=0.0"):
        catalog.make("initializer", "truncated_normal", a=1.0, b=0.0)


@pytest.mark.parametrize("rows,cols,sparsity,zeros", [(40, 30, 0.25, 10), (37, 50, 0.1, 4), (9, 5, 0.0, 0),
                                                      (9, 5, 1.0, 9)])
def test_sparse_fraction_is_exact_per_column(rows, cols, sparsity, zeros):
    x, _ = draw("sparse", (rows, cols), sparsity=sparsity, std=0.5)
    assert np.array_equal((x == 0).sum(axis=0), np.full(cols, zeros))
    assert math.ceil(sparsity * rows) == zeros


def test_sparse_values_and_rows_vary_by_column():
    x, _ = draw("sparse", (400, 500), sparsity=0.3, std=0.05)
    nz = x[x != 0]
    assert_moments(nz, 0.0, 0.05 ** 2)
    masks = {tuple(np.flatnonzero(x[:, j] == 0)) for j in range(x.shape[1])}
    assert len(masks) == x.shape[1]                   # every column zeroes its own rows


def test_normal_uniform_constant_zeros_ones():
    x, _ = draw("normal", mean=0.5, std=0.02)
    assert_moments(x, 0.5, 0.02 ** 2)
    x, _ = draw("uniform", a=-1.0, b=3.0)
    assert x.min() >= -1.0 and x.max() < 3.0 and x.max() > 2.99
    assert_moments(x, 1.0, 16.0 / 12)
    for name, hyper, val in [("constant", {"val": 0.25}, 0.25), ("zeros", {}, 0.0), ("ones", {}, 1.0)]:
        x, pos = draw(name, (5, 3), **hyper)
        assert np.array_equal(x, np.full((5, 3), val, np.float32)) and pos == 0


# ---- bits and positions -------------------------------------------------------------------------------
RANDOM = ["xavier_uniform", "xavier_normal", "kaiming_uniform", "kaiming_normal", "orthogonal", "truncated_normal",
          "sparse", "normal", "uniform"]
WORDS = {"xavier_uniform": 1, "kaiming_uniform": 1, "uniform": 1, "xavier_normal": 2, "kaiming_normal": 2,
         "normal": 2, "orthogonal": 2, "truncated_normal": 2, "sparse": 3}


@pytest.mark.parametrize("name", RANDOM)
def test_same_seed_same_bits_and_recorded_positions(name):
    a, pa = draw(name, (6, 4), seed=11)
    b, pb = draw(name, (6, 4), seed=11)
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32)) and pa == pb == WORDS[name] * 24
    c, _ = draw(name, (6, 4), seed=12)
    assert not np.array_equal(a, c)
    # two parameters in a row; a generator restored at the recorded position draws the second exactly
    g = Generator(11)
    s = g.stream("init")
    init = catalog.make("initializer", name)
    init((6, 4), 4, 6, s)
    recorded = dict(g.positions)
    second = init((5, 7), 7, 5, s)
    resumed = init((5, 7), 7, 5, Generator(11, recorded).stream("init"))
    assert np.array_equal(second.view(np.uint32), resumed.view(np.uint32))


def test_values_are_the_philox_words_by_the_formula():
    """uniform(a, b) = a + (b - a) * u with u = bits_to_uniform(Philox words of (seed 5, 'init') from 0)."""
    x, _ = draw("uniform", (3, 4), seed=5, a=-1.0, b=3.0)
    u = bits_to_uniform(stream_bits(stream_key(5, "init"), 0, 12)).astype(np.float64)
    assert np.array_equal(x, (-1.0 + 4.0 * u).astype(np.float32).reshape(3, 4))
    fi, fo = 4, 3
    x, _ = draw("xavier_uniform", (3, 4), seed=5)
    bound = math.sqrt(6.0 / (fi + fo))
    assert np.array_equal(x, ((2 * u - 1) * bound).astype(np.float32).reshape(3, 4))


# ---- pretrained ---------------------------------------------------------------------------------------
@pytest.fixture
def weights_file(tmp_path):
    from safetensors.numpy import save_file
    rng = np.random.default_rng(0)
    t = {"encoder.layer0.w": rng.standard_normal((4, 3)).astype(np.float32),
         "encoder.layer0.b": rng.standard_normal(4).astype(np.float16),
         "head": rng.standard_normal((2, 4)).astype(np.float64)}
    f = tmp_path / "model.safetensors"
    save_file(t, str(f))
    return f, t


def _pre(f, shape, name, **hyper):
    return catalog.make("initializer", "pretrained", path=str(f), **hyper)(shape, 0, 0, Generator(0).stream("init"),
                                                                           name=name)


def test_pretrained_round_trip(weights_file):
    f, t = weights_file
    x = _pre(f, (4, 3), "encoder.layer0.w")                               # by its own name
    assert x.dtype == np.float32 and np.array_equal(x, t["encoder.layer0.w"])
    x = _pre(f, (2, 4), "anything", key="head")                           # by key, f64 -> f32
    assert np.array_equal(x, t["head"].astype(np.float32))
    mapping = {"fc.weight": "encoder.layer0.w", "fc.bias": "encoder.layer0.b"}
    x = _pre(f, (4,), "fc.bias", mapping=mapping)                         # by mapping, f16 -> f32
    assert np.array_equal(x, t["encoder.layer0.b"].astype(np.float32))
    assert np.array_equal(_pre(f, (4, 3), "fc.weight", mapping=mapping), t["encoder.layer0.w"])


def test_pretrained_errors_name_shapes_and_file(weights_file):
    f, _ = weights_file
    with pytest.raises(catalog.CatalogError) as e:
        _pre(f, (3, 4), "fc.weight", mapping={"fc.weight": "encoder.layer0.w"})
    msg = str(e.value)
    assert "(4, 3)" in msg and "(3, 4)" in msg and str(f) in msg and "fc.weight" in msg
    with pytest.raises(catalog.CatalogError, match="did you mean 'encoder.layer0.w'"):
        _pre(f, (4, 3), "x", key="encoder.layer0.v")
    with pytest.raises(catalog.CatalogError, match="no tensor named 'x'"):
        _pre(f, (4, 3), "x")
    with pytest.raises(catalog.CatalogError, match="no such file"):
        _pre(f.with_name("missing.safetensors"), (4, 3), "x")
    with pytest.raises(catalog.CatalogError, match="needs path"):
        catalog.make("initializer", "pretrained")((4, 3), 3, 4, Generator(0).stream("init"))
    bad = f.with_name("bad.safetensors")
    bad.write_bytes(b"not a safetensors file")
    with pytest.raises(catalog.CatalogError, match="not a readable"):
        _pre(bad, (4, 3), "x")
