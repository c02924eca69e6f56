"""Model surgery: freeze/unfreeze, adapter insertion from catalog initializers (Philox `init` stream),
NF4 encoding of QLoRA's stored weights, and merge_lora.

The merge is checked on the model's forward: the base-model step fed the merged weights gives the same
loss as the adapted step fed base + adapters (rtol 1e-5, f32; for QLoRA the adapted step dequantizes the
NF4 leaves in the graph and the merge dequantizes on the host, the same table and scales).
"""
from __future__ import annotations

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter import catalog
from scellis_jupyter.catalog import CatalogError
from scellis_jupyter.program.training import StepOptions, build_train_step
from scellis_jupyter.executor import run_numpy
from scellis_jupyter.rng.generator import Generator
from scellis_jupyter.graph.quantize import dequantize, quantize
from scellis_jupyter.run.surgery import encode_stored, freeze, insert_adapters, merge_lora, unfreeze

from fixtures import spec_text

MLP = spec_text("surgery_mlp")


@pytest.fixture(scope="module")
def spec():
    return sc.Spec.from_text(MLP)


def base_params(spec):
    r = np.random.default_rng(0)
    return {p.name: (0.2 * r.standard_normal(p.shape)).astype(np.float32) for p in spec.graph.params}


def loss(spec, params, peft, ref, x, y):
    opts = StepOptions(peft=tuple(sorted(peft.items()))) if peft else None
    step = build_train_step(spec, 4, "reference", "debug", options=opts)
    fd = {"x": x, "y": y, "lr": np.float32(0.0), "step": np.float32(1.0)}
    fd.update(params)
    return run_numpy(step, {l.name: fd[l.name] for l in step.leaves}, ref.impl)["loss"]


def test_insert_adapters_uses_catalog_initializers(spec):
    ad = catalog.make("peft", "lora", rank=2, alpha=4.0).apply(spec.graph)
    p = insert_adapters(base_params(spec), ad, Generator(5))
    q = insert_adapters(base_params(spec), ad, Generator(5))
    for d in ad.new_params:
        assert p[d.name].shape == d.shape and p[d.name].dtype == np.float32
        np.testing.assert_array_equal(p[d.name], q[d.name])          # same seed, same bits
    a = p["0.linear.lora_A"]
    bound = np.sqrt(3.0) * np.sqrt(2.0 / (1 + 0.0)) / np.sqrt(64)  # kaiming_uniform, leaky_relu a=0, fan_in 64
    assert np.abs(a).max() <= bound and np.abs(a).max() > 0.5 * bound
    assert not p["0.linear.lora_B"].any()
    r = insert_adapters(base_params(spec), ad, Generator(6))
    assert not np.array_equal(r["0.linear.lora_A"], a)
    with pytest.raises(CatalogError, match="already exists"):
        insert_adapters(p, ad, Generator(5))


def test_freeze_unfreeze(spec):
    ad = catalog.make("peft", "bitfit").apply(spec.graph)
    assert ad.trainable == {"0.linear.bias", "2.linear.bias"}
    assert freeze(ad, "0.*") == {"0.linear.bias"} and ad.trainable == {"2.linear.bias"}
    assert unfreeze(ad, base_params(spec), ["2.linear.weight"]) == {"2.linear.weight"}
    assert ad.trainable == {"2.linear.bias", "2.linear.weight"}
    with pytest.raises(CatalogError, match="no parameter"):
        unfreeze(ad, base_params(spec), "9.*")
    ql = catalog.make("peft", "qlora", rank=2).apply(spec.graph)
    with pytest.raises(CatalogError, match="nf4"):
        unfreeze(ql, base_params(spec), "0.linear.weight")


@pytest.mark.parametrize("method", ["lora", "qlora"])
def test_merged_forward_equals_adapted_forward(spec, ref, method):
    cfg = {"method": method, "rank": 3, "alpha": 6.0}
    ad = catalog.make("peft", method, rank=3, alpha=6.0).apply(spec.graph)
    r = np.random.default_rng(2)
    p = insert_adapters(base_params(spec), ad, Generator(1))
    for d in ad.new_params:             # non-zero B, so the merge has something to fold
        p[d.name] = (0.3 * r.standard_normal(d.shape)).astype(np.float32)
    stored = encode_stored(p, ad)
    if method == "qlora":
        assert "0.linear.weight" not in stored and stored["0.linear.weight.codes"].dtype == np.int8
        q = quantize(p["0.linear.weight"], "nf4")
        np.testing.assert_array_equal(stored["0.linear.weight.codes"], q.codes)
    else:
        assert stored.keys() == p.keys()
    x = r.standard_normal((4, 64)).astype(np.float32)
    y = r.integers(0, 10, 4).astype(np.int32)
    adapted = loss(spec, stored, cfg, ref, x, y)
    merged = merge_lora(stored, ad)
    assert set(merged) == {q.name for q in spec.graph.params}
    plain = loss(spec, merged, None, ref, x, y)
    np.testing.assert_allclose(plain, adapted, rtol=1e-5)
    # and the merge is W (or dequantized W) + s B A, computed here independently
    w0 = p["0.linear.weight"] if method == "lora" else dequantize(quantize(p["0.linear.weight"], "nf4"))
    want = w0.astype(np.float64) + 2.0 * p["0.linear.lora_B"].astype(np.float64) @ p["0.linear.lora_A"]
    np.testing.assert_allclose(merged["0.linear.weight"], want, rtol=1e-6, atol=1e-6)
    with pytest.raises(CatalogError, match="no LoRA"):
        merge_lora(p, catalog.make("peft", "bitfit").apply(spec.graph))
