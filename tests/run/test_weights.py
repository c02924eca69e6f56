"""init_params over a spec's graph: every declared parameter, its shape, drawn in order from the init stream.

Checks: names and order equal graph.params, shapes and float32; biases zeros and norm scales ones (what
layers declare); each weight equals its catalog initializer drawn at the stream position left by the
ones before it (so the order is the declaration order and nothing else touches the stream); same seed ->
identical bits, another seed -> other weights; overrides by exact name and glob, with hyperparameters;
an override that matches nothing, or an unknown initializer, is a CatalogError naming it.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter import catalog
from scellis_jupyter.rng import Generator
from scellis_jupyter.run.weights import init_params

MLP = '''[data]
dataset = "digits"
[model]
nodes = [
  { op = "linear", out = 128, init = "kaiming_normal" },
  { op = "relu" },
  { name = "logits", op = "linear", out = 10 },
]
'''

TRANSFORMER = '''[data]
dataset = "pydoc_topics"
seq_len = 12
[model]
input = { shape = [12], dtype = "i32" }
nodes = [
  { name = "tok", op = "embedding", vocab = 96, dim = 16 },
  { name = "pos", op = "positional_embedding", max_len = 32 },
  { name = "b1", op = "transformer_block", heads = 4, causal = true },
  { name = "head", op = "linear", out = 96 },
]
'''


@pytest.fixture(scope="module")
def mlp():
    return sc.Spec.from_text(MLP).graph


@pytest.fixture(scope="module")
def transformer():
    return sc.Spec.from_text(TRANSFORMER).graph


def test_every_param_present_in_order_with_its_shape(mlp, transformer):
    for graph in (mlp, transformer):
        w = init_params(graph, Generator(0))
        assert list(w) == [d.name for d in graph.params]
        for d in graph.params:
            assert w[d.name].shape == tuple(d.shape) and w[d.name].dtype == np.float32
            assert np.all(np.isfinite(w[d.name]))
            if d.init == "zeros":
                assert not w[d.name].any()
            elif d.init == "ones":
                assert np.all(w[d.name] == 1.0)
            else:
                assert np.unique(w[d.name]).size > 1
    inits = {d.init for d in transformer.params}
    assert {"zeros", "ones", "normal", "xavier_uniform"} <= inits


def test_each_weight_is_its_initializer_at_the_stream_position(transformer):
    gen = Generator(4)
    w = init_params(transformer, gen)
    replay = Generator(4).stream("init")
    for d in transformer.params:
        want = catalog.make("initializer", d.init)(tuple(d.shape), d.fan_in, d.fan_out, replay, name=d.name)
        assert np.array_equal(w[d.name].view(np.uint32), want.view(np.uint32)), d.name
    assert gen.positions["init"] == replay.position > 0


def test_statistics_of_the_declared_initializers(mlp):
    w = init_params(mlp, Generator(1))
    d0 = mlp.params[0]
    x = w[d0.name].astype(np.float64)
    var = 2.0 / d0.fan_in                                     # kaiming_normal, leaky_relu a=0: gain^2 = 2
    assert abs(x.var() - var) < 3 * math.sqrt(((x - x.mean()) ** 2).var() / x.size)
    head = w["logits.weight"]
    bound = math.sqrt(3.0) * math.sqrt(2.0) / math.sqrt(128)  # kaiming_uniform default, fan_in 128
    assert np.abs(head).max() <= bound * (1 + 1e-6)


def test_deterministic_per_seed(transformer):
    a, b = init_params(transformer, Generator(7)), init_params(transformer, 7)
    c = init_params(transformer, Generator(8))
    for k in a:
        assert np.array_equal(a[k].view(np.uint32), b[k].view(np.uint32))
    for k in ("tok.weight", "b1.attn.q.weight", "head.weight"):
        assert not np.array_equal(a[k], c[k])


def test_overrides_by_name_and_glob(mlp, tmp_path):
    base = init_params(mlp, Generator(0))
    w = init_params(mlp, Generator(0), {"logits.weight": ("normal", {"std": 0.02}),
                                         "*.bias": ("constant", {"val": 0.5})})
    assert np.all(w["logits.bias"] == 0.5) and np.all(w["0.linear.bias"] == 0.5)
    assert np.array_equal(w["0.linear.weight"], base["0.linear.weight"])      # untouched, same stream start
    assert 0.015 < w["logits.weight"].std() < 0.025
    from safetensors.numpy import save_file
    pre = np.arange(1280, dtype=np.float32).reshape(10, 128)
    f = tmp_path / "head.safetensors"
    save_file({"classifier.weight": pre}, str(f))
    hyper = {"path": str(f), "mapping": {"logits.weight": "classifier.weight"}}
    w = init_params(mlp, Generator(0), {"logits.weight": ("pretrained", hyper), "0.linear.weight": "orthogonal"})
    assert np.array_equal(w["logits.weight"], pre)
    m = w["0.linear.weight"].astype(np.float64)
    np.testing.assert_allclose(m.T @ m, np.eye(64), atol=1e-5)


def test_bad_overrides_and_names_are_clear_errors(mlp):
    with pytest.raises(catalog.CatalogError,
                       match="(?s)logits.wieght.*matches no parameter.*did you mean 'logits.weight'"):
        init_params(mlp, Generator(0), {"logits.wieght": "zeros"})
    with pytest.raises(catalog.CatalogError, match="(?s)'logits.weight'.*no initializer named 'kaiming_norml'"):
        init_params(mlp, Generator(0), {"logits.weight": "kaiming_norml"})
    with pytest.raises(catalog.CatalogError, match="not an initializer name"):
        init_params(mlp, Generator(0), {"logits.weight": 3})
    with pytest.raises(catalog.CatalogError, match="std"):
        init_params(mlp, Generator(0), {"logits.weight": ("normal", {"std": -1.0})})
    with pytest.raises(catalog.CatalogError, match="Generator or a seed"):
        init_params(mlp, "seed")
