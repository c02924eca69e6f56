"""Two-network (GAN) specs: both networks in one text, checked before compute, errors at line:col.

Expected positions are counted by hand in the texts below (line 1 is the `name = ...` line).
"""
from __future__ import annotations

import pytest

import scellis_jupyter as sc

GAN = """name = "g"
[data]
dataset = "synthetic_ring"
[model.generator]
input = { shape = [4] }
nodes = [{ op = "linear", out = 16 }, { op = "relu" }, { op = "linear", out = 2 }]
[model.discriminator]
nodes = [{ op = "linear", out = 16 }, { op = "tanh" }, { op = "linear", out = 1 }]
[recipe]
kind = "gan"
optimizer = { name = "adam", lr = 2e-4, betas = [0.5, 0.999] }
batch_size = 8
[recipe.discriminator]
optimizer = { name = "sgd", lr = 0.1 }
clip_grad_value = 0.5
"""


def error_of(text):
    with pytest.raises(sc.SpecError) as e:
        sc.Spec.from_text(text)
    return e.value


def test_a_gan_spec_has_two_graphs_and_per_network_recipes():
    s = sc.Spec.from_text(GAN)
    assert s.kind == "gan" and set(s.models) == set(s.graphs) == {"generator", "discriminator"}
    g, d = s.graphs["generator"], s.graphs["discriminator"]
    assert (g.input_shape, g.output_shape, d.input_shape, d.output_shape) == ((4,), (2,), (2,), (1,))
    r = s.recipe
    assert (r["loss"], r["noise"], r["d_steps"], r["g_steps"]) == ("non_saturating", "normal", 1, 1)
    assert r["generator"]["optimizer"] == {"name": "adam", "lr": 2e-4, "betas": [0.5, 0.999]}   # inherited
    assert r["discriminator"]["optimizer"]["name"] == "sgd" and r["discriminator"]["clip_grad_value"] == 0.5
    assert r["generator"]["clip_grad_value"] is None
    assert "generator 3 nodes" in repr(s) and s.to_dict()["model"]["discriminator"]["nodes"][1]["op"] == "tanh"
    with pytest.raises(sc.SpecError, match="spec.graphs") as e:
        s.graph
    assert e.value.where == "<spec>:4:2"


@pytest.mark.parametrize("old,new,where,words", [
    ('input = { shape = [4] }\n', "", "<spec>:4:8", ["generator's input (its noise) has no shape"]),
    ('{ op = "linear", out = 2 }]', '{ op = "linear", out = 3 }]', "<spec>:6:56",
     ["generator makes examples of shape [3]", "discriminator takes [2]"]),
    ('{ op = "linear", out = 1 }]', '{ op = "linear", out = 2 }]', "<spec>:8:56", ["one logit", "shape [2]"]),
    ('kind = "gan"', 'kind = "gann"', "<spec>:10:8", ["unknown recipe kind 'gann'", "did you mean 'gan'"]),
    ('kind = "gan"', 'kind = "gan"\nloss = "hinj"', "<spec>:11:8", ["unknown GAN loss 'hinj'", "'hinge'"]),
    ('clip_grad_value = 0.5', 'clip_grad_valu = 0.5', "<spec>:15:1", ["unknown key 'clip_grad_valu'",
                                                                        "did you mean 'clip_grad_value'"]),
    ('kind = "gan"', 'kind = "gan"\nprecision = "mixed-f16"', "<spec>:11:1", ["mixed precision", "not supported"]),
    ('kind = "gan"', 'kind = "gan"\nnoise = "gaussian"', "<spec>:11:9", ["unknown noise distribution"]),
    ('kind = "gan"', 'kind = "gan"\nd_steps = 0', "<spec>:11:11", ["recipe.d_steps must be between 1 and 10000"]),
    ('dataset = "synthetic_ring"', 'dataset = "synthetic_ring"\nn_features = 3', "<spec>:4:1",
     ["synthetic_ring is 2-D"]),
    ('dataset = "synthetic_ring"', 'dataset = "digits"', "<spec>:6:56",
     ["generator makes examples of shape [2]", "discriminator takes [64]"]),
])
def test_gan_spec_errors_point_at_the_line(old, new, where, words):
    assert old in GAN
    e = error_of(GAN.replace(old, new, 1))
    assert e.where == where, (e.where, str(e))
    for w in words:
        assert w in str(e), str(e)


def test_kind_and_networks_go_together():
    no_kind = GAN.replace('kind = "gan"\n', "")
    e = error_of(no_kind)                        # the per-network table is the first thing that needs the kind
    assert e.where == "<spec>:12:9" and 'kind = "gan"' in e.diagnostic.hint
    e = error_of(no_kind[:no_kind.index("[recipe.discriminator]")])
    assert e.where == "<spec>:4:8" and "trains adversarially" in str(e) and 'kind = "gan"' in e.diagnostic.hint
    one = '[data]\ndataset = "iris"\n[model]\nnodes = [{ op = "linear", out = 3 }]\n[recipe]\nkind = "gan"\n'
    e = error_of(one)
    assert e.where == "<spec>:6:8" and "[model.generator]" in e.diagnostic.hint
    e = error_of(one.replace('kind = "gan"', "d_steps = 2"))
    assert e.where == "<spec>:6:1" and "two-network training only" in str(e)
    e = error_of(GAN.replace("[model.discriminator]\n", "[model.critic]\n"))
    got = {(d.where, d.message.split(",")[0]) for d in e.diagnostics}
    assert got == {("<spec>:4:2", "a two-network model needs [model.discriminator]"),
                   ("<spec>:7:8", "a two-network [model] holds only [model.generator] and [model.discriminator]")}
    e = error_of(GAN.replace("[model.generator]\n", "[model]\nnodes = []\n[model.generator]\n"))
    assert "not 'nodes'" in str(e)


def test_token_data_cannot_be_generated():
    text = GAN.replace('dataset = "synthetic_ring"', 'dataset = "pydoc_topics"\nseq_len = 8')
    e = error_of(text)
    assert "real-valued" in str(e) and e.where == "<spec>:3:11"


def test_the_ring_dataset_is_what_its_metadata_says():
    from scellis_jupyter.data import load_dataset, ring_centers
    s = sc.Spec.from_text(GAN.replace('dataset = "synthetic_ring"', 'dataset = "synthetic_ring"\nn_rows = 800\n'
                                      'n_classes = 5\nnoise = 0.05'))
    info = s.dataset
    ds = load_dataset(None, s.data)
    x, y = ds.read(list(range(len(ds))))
    assert (info.n_rows, info.feature_shape, info.n_classes) == (len(ds), x.shape[1:], 5) == (800, (2,), 5)
    assert sorted(set(y.tolist())) == list(range(5)) and (y == 0).sum() == 160       # balanced modes
    import numpy as np
    r = x - ring_centers(5)[y]
    assert abs(r.std() - 0.05) < 0.005 and abs(r.mean()) < 0.01                      # N(0, 0.05^2) around each
    np.testing.assert_allclose(np.linalg.norm(ring_centers(5), axis=1), 2.0)
    assert np.array_equal(load_dataset(None, s.data).read([0, 1, 2])[0], x[:3])      # the same bytes again
