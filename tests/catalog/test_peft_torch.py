"""PEFT entries against the same models written in PyTorch (CPU, float64).

Each method's training step (SGD, lr = 1, no momentum or decay, so grad = old - new) runs with
`run_numpy` on the reference backend in f32; PyTorch computes loss and gradients of the adapter params
in float64 from the same numbers. Tolerances: loss rtol 1e-4; gradients rtol 1e-4 with atol 2e-6
(the gradient is recovered as old - new in f32, whose rounding is ~1e-7 of |old|). Frozen params are no
step outputs and have no optimizer state; info["factor"] is checked against counts made here from the
shapes. The planned peak of LoRA and QLoRA is below full fine-tuning (AdamW: no gradients or moments for
the frozen weights), and QLoRA's parameter bytes are LoRA's minus 4 bytes per stored weight plus its NF4
bytes (n/2 code bytes + 4 bytes per block of 64), worked out from the shapes in the test.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter import catalog
from scellis_jupyter.catalog import CatalogError
from scellis_jupyter.program.training import StepOptions, build_train_step
from scellis_jupyter.executor import run_numpy

from fixtures import spec_text

torch = pytest.importorskip("torch")

MLP = spec_text("peft_mlp")

TF = spec_text("peft_tf")
B = {"mlp": 4, "tf": 3}


def spec_of(which):
    return sc.Spec.from_text(MLP if which == "mlp" else TF)


def step_for(spec, peft: dict, batch):
    return build_train_step(spec, batch, "reference", "debug",
                            options=StepOptions(peft=tuple(sorted(peft.items()))))


def feeds(step, seed=0):
    r = np.random.default_rng(seed)
    out = {}
    for leaf in step.leaves:
        n = leaf.node
        if leaf.name == "lr":
            out[leaf.name] = np.float32(1.0)
        elif leaf.name == "step":
            out[leaf.name] = np.float32(1.0)
        elif n.dtype == "i32":
            out[leaf.name] = r.integers(0, int(step.info["classes"]), n.shape)
        elif leaf.name.endswith("ia3_l"):
            out[leaf.name] = 1.0 + 0.3 * r.standard_normal(n.shape)
        else:
            out[leaf.name] = 0.3 * r.standard_normal(n.shape)
        out[leaf.name] = np.asarray(out[leaf.name]).astype(np.float32 if n.dtype == "f32" else np.int32)
    return out


# ---- the same models in PyTorch float64 -------------------------------------------------------------
def t64(a):
    return torch.tensor(np.asarray(a, np.float64), dtype=torch.float64)


def lin(x, p, pre, W=None):
    w = p[pre + "weight"] if W is None else W
    y = x @ w.T
    return y + p[pre + "bias"] if pre + "bias" in p else y


def weight(p, pre, method, scale=None):
    """The effective weight under LoRA / IA3 (rows for k, v, hidden; columns for fc2)."""
    w = p[pre + "weight"]
    if method == "lora" and pre + "lora_A" in p:
        return w + scale * p[pre + "lora_B"] @ p[pre + "lora_A"]
    if method == "ia3" and pre + "ia3_l" in p:
        return w * p[pre + "ia3_l"][None, :] if pre.endswith("fc2.") else w * p[pre + "ia3_l"][:, None]
    return w


def torch_lin(x, p, pre, method, scale):
    y = x @ weight(p, pre, method, scale).T
    if pre + "bias" in p:
        b = p[pre + "bias"]
        if method == "ia3" and pre + "ia3_l" in p and not pre.endswith("fc2."):
            b = b * p[pre + "ia3_l"]
        y = y + b
    return y


def torch_mlp(p, x, method, scale=None):
    h = torch.relu(torch_lin(x, p, "0.linear.", method, scale))
    h = torch.tanh(torch_lin(h, p, "2.linear.", method, scale))
    return torch_lin(h, p, "4.linear.", method, scale)


def torch_tf(p, tokens, method, scale=None, P=0):
    F = torch.nn.functional
    e = p["0.embedding.weight"][torch.as_tensor(tokens, dtype=torch.long)]
    b, L, d = e.shape
    e = e + p["1.positional_embedding.weight"][:L]            # real tokens keep positions 0..L-1
    if method == "prompt_tuning":
        e = torch.cat([p["0.embedding.prompt"].expand(b, P, d), e], 1)
    n = e.shape[1]
    pre = "2.transformer_block."
    ln1 = F.layer_norm(e, (d,), p[pre + "ln1.weight"], p[pre + "ln1.bias"], 1e-5)
    heads, dh = 2, d // 2

    def split(t):
        return t.reshape(b, -1, heads, dh).permute(0, 2, 1, 3)
    q, k, v = (split(torch_lin(ln1, p, pre + f"attn.{c}.", method, scale)) for c in "qkv")
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    if method == "prefix_tuning":
        k = torch.cat([split(p[pre + "prefix_k"].expand(b, P, d)), k], 2)
        v = torch.cat([split(p[pre + "prefix_v"].expand(b, P, d)), v], 2)
        mask = torch.cat([torch.ones(n, P, dtype=torch.bool), mask], 1)   # every query sees all prefixes
    s = (q @ k.transpose(-1, -2)) / math.sqrt(dh)
    a = torch.softmax(s.masked_fill(~mask, float("-inf")), -1) @ v
    h = e + torch_lin(a.permute(0, 2, 1, 3).reshape(b, n, d), p, pre + "attn.o.", method, scale)
    ln2 = F.layer_norm(h, (d,), p[pre + "ln2.weight"], p[pre + "ln2.bias"], 1e-5)
    m = torch_lin(F.gelu(torch_lin(ln2, p, pre + "mlp.fc1.", method, scale)), p, pre + "mlp.fc2.", method, scale)
    out = torch_lin(h + m, p, "3.linear.", method, scale)
    return out[:, P:] if method == "prompt_tuning" else out


def torch_loss(which, fd, names, method, scale=None, P=0):
    p = {k: t64(v) for k, v in fd.items() if k not in ("x", "y", "lr", "step")}
    for n in names:
        p[n].requires_grad_(True)
    if which == "mlp":
        logits = torch_mlp(p, t64(fd["x"]), method, scale)
    else:
        logits = torch_tf(p, fd["x"], method, scale, P)
    y = torch.as_tensor(fd["y"], dtype=torch.long)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    loss.backward()
    return float(loss.detach()), {n: p[n].grad.numpy() for n in names}


CASES = [
    ("mlp", {"method": "lora", "rank": 3, "alpha": 6.0}),
    ("tf", {"method": "lora", "rank": 2, "alpha": 4.0}),
    ("tf", {"method": "lora", "rank": 2, "alpha": 2.0, "targets": ["*.attn.q.weight", "*.attn.v.weight"]}),
    ("mlp", {"method": "ia3"}),
    ("tf", {"method": "ia3"}),
    ("mlp", {"method": "bitfit"}),
    ("tf", {"method": "bitfit"}),
    ("tf", {"method": "prompt_tuning", "num_virtual_tokens": 3}),
    ("tf", {"method": "prefix_tuning", "num_virtual_tokens": 2}),
]


@pytest.mark.parametrize("which,cfg", CASES, ids=[f"{w}-{c['method']}-{i}" for i, (w, c) in enumerate(CASES)])
def test_step_matches_torch(which, cfg, ref):
    spec = spec_of(which)
    step = step_for(spec, cfg, B[which])
    adapt = catalog.make("peft", cfg["method"], **{k: v for k, v in cfg.items() if k != "method"}).apply(spec.graph)
    trainable = sorted(set(adapt.trainable) | {p.name for p in adapt.new_params})
    base = {p.name for p in spec.graph.params}
    # frozen params: no update output, no optimizer state
    assert sorted(o[6:] for o in step.outputs if o.startswith("param:")) == trainable
    assert not any(o.startswith("state:") for o in step.outputs)
    fd = feeds(step)
    res = run_numpy(step, fd, ref.impl)
    scale = cfg.get("alpha", 0) / cfg.get("rank", 1)
    want_loss, want_g = torch_loss(which, fd, trainable, cfg["method"], scale, cfg.get("num_virtual_tokens", 0))
    np.testing.assert_allclose(res["loss"], want_loss, rtol=1e-4)
    for n in trainable:
        got = fd[n].astype(np.float64) - res[f"param:{n}"].astype(np.float64)
        np.testing.assert_allclose(got, want_g[n], rtol=1e-4, atol=2e-6, err_msg=n)
        if not n.endswith("attn.k.bias"):    # softmax is shift-invariant: the key bias gradient is 0
            assert np.abs(want_g[n]).max() > 2e-5, n    # well above atol: not a vacuous match
    # the trainable fraction, counted here from the shapes
    sizes = {p.name: math.prod(p.shape) for p in spec.graph.params}
    new = sum(math.prod(p.shape) for p in adapt.new_params)
    tr = sum(sizes[n] for n in trainable if n in base) + new
    assert step.info["peft"]["factor"] == pytest.approx(tr / (sum(sizes.values()) + new), rel=1e-12)
    assert adapt.info["factor"] == step.info["peft"]["factor"]


def test_lora_counts_and_identity_at_init(ref):
    spec = spec_of("tf")
    ad = catalog.make("peft", "lora", rank=2, alpha=4.0).apply(spec.graph)
    # q, k, v, o (8x8), fc1 (16x8), fc2 (8x16), head (96x8): r * (in + out) each
    shapes = [(8, 8)] * 4 + [(16, 8), (8, 16), (96, 8)]
    assert sum(math.prod(p.shape) for p in ad.new_params) == sum(2 * (o + i) for o, i in shapes)
    assert ad.info["rank"] == 2 and not ad.trainable
    assert {p.init for p in ad.new_params if p.name.endswith("lora_B")} == {"zeros"}
    # B = 0: the adapted forward is the base model's (same loss as a plain step on the same weights)
    step = step_for(spec, {"method": "lora", "rank": 2, "alpha": 4.0}, 3)
    fd = feeds(step)
    for k in fd:
        if k.endswith("lora_B"):
            fd[k] = np.zeros_like(fd[k])
    plain = build_train_step(spec, 3, "reference", "debug")
    fp = {l.name: fd[l.name] for l in plain.leaves}
    np.testing.assert_array_equal(run_numpy(step, fd, ref.impl)["loss"], run_numpy(plain, fp, ref.impl)["loss"])


def test_qlora_step_uses_nf4_weights_and_matches_lora_on_dequantized(ref):
    from scellis_jupyter.graph.quantize import dequantize, quantize
    spec = spec_of("mlp")
    cfg = {"method": "qlora", "rank": 3, "alpha": 6.0}
    step = step_for(spec, cfg, 4)
    names = {l.name for l in step.leaves}
    assert "0.linear.weight.codes" in names and "0.linear.weight.absmax" in names and "0.linear.weight" not in names
    r = np.random.default_rng(3)
    fd = feeds(step)
    lfd = feeds(step_for(spec, {"method": "lora", "rank": 3, "alpha": 6.0}, 4))
    for p in spec.graph.params:
        if p.role == "weight":
            q = quantize(r.standard_normal(p.shape).astype(np.float32) * 0.3, "nf4")
            fd[p.name + ".codes"], fd[p.name + ".absmax"] = q.codes, q.absmax
            lfd[p.name] = dequantize(q)
    for k in lfd:
        if k in fd:
            lfd[k] = fd[k]
    lora = step_for(spec, {"method": "lora", "rank": 3, "alpha": 6.0}, 4)
    a, b = run_numpy(step, fd, ref.impl), run_numpy(lora, lfd, ref.impl)
    np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-6)
    assert sorted(k for k in a if k.startswith("param:")) == sorted(k for k in b if k.startswith("param:"))
    for k in a:
        if k.startswith("param:"):
            np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-7, err_msg=k)


def test_planned_peak_lora_qlora_below_full(ref):
    base = TF.replace('optimizer = { name = "sgd", lr = 1.0 }', 'optimizer = { name = "adamw", lr = 1e-3 }')
    peft_line = {"lora": 'peft = { method = "lora", rank = 2, alpha = 4.0 }',
                 "qlora": 'peft = { method = "qlora", rank = 2, alpha = 4.0 }'}
    full = sc.plan(sc.Spec.from_text(base), device="reference")
    plans = {k: sc.plan(sc.Spec.from_text(base.replace("[recipe]\n", f"[recipe]\n{v}\n")), device="reference")
             for k, v in peft_line.items()}
    assert plans["lora"].peak_bytes < full.peak_bytes and plans["qlora"].peak_bytes < full.peak_bytes
    spec = spec_of("tf")
    lo = step_for(spec, {"method": "lora", "rank": 2, "alpha": 4.0}, 3)
    ql = step_for(spec, {"method": "qlora", "rank": 2, "alpha": 4.0}, 3)
    # stored weights: q, k, v, o (64 each), fc1, fc2 (128 each), head (768): f32 4 B each in LoRA;
    # NF4: ceil(n/2) code bytes + 4 B per block of 64
    ns = [64] * 4 + [128, 128, 768]
    f32_bytes = 4 * sum(ns)
    nf4_bytes = sum((n + 1) // 2 + 4 * -(-n // 64) for n in ns)
    assert (f32_bytes, nf4_bytes) == (5120, 640 + 4 * 20)   # 1280 weights, 20 blocks
    assert lo.leaf_bytes("parameter") - ql.leaf_bytes("parameter") == f32_bytes - nf4_bytes


def test_user_mistakes_are_catalog_errors():
    g = spec_of("mlp").graph
    with pytest.raises(CatalogError, match="ranc"):
        catalog.make("peft", "lora", ranc=4)
    with pytest.raises(CatalogError, match="out of range"):
        catalog.make("peft", "lora", dropout=0.1)
    with pytest.raises(CatalogError, match="match no"):
        catalog.make("peft", "lora", targets=["*.attn.q.weight"]).apply(g)
    with pytest.raises(CatalogError, match="embedding"):
        catalog.make("peft", "prompt_tuning").apply(g)
    with pytest.raises(CatalogError, match="attention"):
        catalog.make("peft", "prefix_tuning").apply(g)
    with pytest.raises(CatalogError, match="no peft named"):
        catalog.make("peft", "lorra")


def test_prompt_tuning_needs_no_longer_positional_table(ref):
    """max_len = seq_len = 6 and 3 virtual tokens: the real tokens keep positions 0..5, nothing overflows."""
    spec = spec_of("tf")
    step = step_for(spec, {"method": "prompt_tuning", "num_virtual_tokens": 3}, 3)
    res = run_numpy(step, feeds(step), ref.impl)
    assert np.isfinite(res["loss"])
