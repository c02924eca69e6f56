"""The GAN step Programs against the same two MLPs written in PyTorch (CPU, float64, the same weights).

Both steps are built in f64 on the reference backend with SGD (lr = 1, no momentum), so the gradient is
old - new exactly up to f64 rounding. The noise the step draws from the Philox stream "noise" is rebuilt
here in numpy (the stream's words -> uniforms u1, u2 -> Box-Muller written out in the test), and torch
runs the textbook losses on it (softplus / relu / squares of the logits; Goodfellow et al. 2014, Lim &
Ye 2017, Mao et al. 2017). Tolerances: losses and mean logits rtol 1e-10; gradients rtol 1e-8, atol 1e-12.

Also: the discriminator step has no output (update) for the generator's weights and vice versa, and the
clipped discriminator step matches torch.nn.utils.clip_grad_norm_ / clip_grad_value_.
"""
from __future__ import annotations

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.program.adversarial import GAN_LOSSES, build_gan_step
from scellis_jupyter.executor import run_numpy
from scellis_jupyter.rng.generator import base_words
from scellis_jupyter.rng.philox import bits_to_uniform, stream_bits, stream_key

torch = pytest.importorskip("torch")

SPEC = """
name = "tiny-gan"
[data]
dataset = "synthetic_ring"
n_rows = 64
[model.generator]
input = {{ shape = [3] }}
nodes = [{{ op = "linear", out = 5 }}, {{ op = "tanh" }}, {{ op = "linear", out = 4 }}, {{ op = "relu" }},
         {{ op = "linear", out = 2 }}]
[model.discriminator]
nodes = [{{ op = "linear", out = 6 }}, {{ op = "tanh" }}, {{ op = "linear", out = 1 }}]
[recipe]
kind = "gan"
loss = "{loss}"
noise = "{noise}"
optimizer = {{ name = "sgd", lr = 1.0 }}
batch_size = 5
determinism = "debug"
seed = 11
{extra}
"""
B, POS = 5, 1000


def spec_of(loss="non_saturating", noise="normal", extra=""):
    return sc.Spec.from_text(SPEC.format(loss=loss, noise=noise, extra=extra))


def noise(seed, pos, shape, kind):
    """The step's draw, written out: words of stream 'noise' from `pos`, top 24 bits -> [0, 1)."""
    n = int(np.prod(shape))
    key = stream_key(seed, "noise")
    u1 = bits_to_uniform(stream_bits(key, pos, n)).astype(np.float64).reshape(shape)
    if kind == "uniform":
        return 2.0 * u1 - 1.0
    u2 = bits_to_uniform(stream_bits(key, pos + n, n)).astype(np.float64).reshape(shape)
    return np.sqrt(-2.0 * np.log(1.0 - u1)) * np.cos(2.0 * np.pi * u2)


def feeds_for(step, spec, rng):
    out = {}
    for leaf in step.leaves:
        n = leaf.node
        if leaf.role == "parameter":
            out[leaf.name] = rng.standard_normal(n.shape) * 0.6
        elif leaf.name in ("lr", "step"):
            out[leaf.name] = np.float32(1.0)
        elif leaf.name == "rng:noise":
            out[leaf.name] = base_words(POS)
        elif leaf.name == "x":
            out[leaf.name] = rng.standard_normal(n.shape) * 2.0
        else:
            raise AssertionError(leaf.name)
    return out


def t(a, grad=False):
    return torch.tensor(np.asarray(a, np.float64), dtype=torch.float64, requires_grad=grad)


def torch_nets(spec, fd):
    """nn.Sequential copies of both networks with the engine's weights (W is [out, in] in both)."""
    acts = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU}
    nets = {}
    for net, g in spec.graphs.items():
        layers = []
        for node in g.spec.nodes:
            if node.op == "linear":
                lin = torch.nn.Linear(1, 1).double()
                lin.weight = torch.nn.Parameter(t(fd[f"{net}/{node.key}.weight"]))
                lin.bias = torch.nn.Parameter(t(fd[f"{net}/{node.key}.bias"]))
                layers.append(lin)
            else:
                layers.append(acts[node.op]())
        nets[net] = torch.nn.Sequential(*layers)
    return nets


def torch_losses(name, real, fake):
    sp = torch.nn.functional.softplus
    d = {"non_saturating": sp(-real).mean() + sp(fake).mean(), "minimax": sp(-real).mean() + sp(fake).mean(),
         "hinge": torch.relu(1 - real).mean() + torch.relu(1 + fake).mean(),
         "least_squares": 0.5 * ((real - 1) ** 2).mean() + 0.5 * (fake ** 2).mean()}
    g = {"non_saturating": sp(-fake).mean(), "minimax": -sp(fake).mean(), "hinge": -fake.mean(),
         "least_squares": 0.5 * ((fake - 1) ** 2).mean()}
    return d[name], g[name]


def check_grads(res, fd, nets, net, prefix):
    seen = 0
    for name, p in nets[net].named_parameters():
        idx, kind = name.split(".")
        key = f"{net}/{prefix[int(idx)]}.{kind}"
        got = fd[key] - res[f"param:{key}"]
        want = p.grad.numpy()
        np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-12, err_msg=key)
        if kind == "weight":                           # a real gradient, not a vacuous match (a hinge's last
            assert np.abs(want).max() > 1e-6, key      # bias gradient can be 0: as many real as fake active)
        seen += 1
    return seen


@pytest.mark.parametrize("loss", GAN_LOSSES)
@pytest.mark.parametrize("dist", ["normal", "uniform"])
def test_both_steps_match_torch_float64(loss, dist, ref):
    spec = spec_of(loss, dist)
    rng = np.random.default_rng(3)
    dstep = build_gan_step(spec, "discriminator", B, "reference", "debug", dtype="f64")
    fd = feeds_for(dstep, spec, rng)
    res = run_numpy(dstep, fd, ref.impl)
    keys = {net: [n.key for n in g.spec.nodes] for net, g in spec.graphs.items()}
    # torch: D step on real x and G(z) with the generator frozen (detached)
    nets = torch_nets(spec, fd)
    z = t(noise(11, POS, (B, 3), dist))
    fake = nets["generator"](z).detach()
    real_logit, fake_logit = nets["discriminator"](t(fd["x"])), nets["discriminator"](fake)
    d_loss, _ = torch_losses(loss, real_logit, fake_logit)
    d_loss.backward()
    np.testing.assert_allclose(res["loss"], d_loss.item(), rtol=1e-10)
    np.testing.assert_allclose(res["d_real"], real_logit.mean().item(), rtol=1e-10)
    np.testing.assert_allclose(res["d_fake"], fake_logit.mean().item(), rtol=1e-10)
    assert check_grads(res, fd, nets, "discriminator", keys["discriminator"]) == 4
    assert not [k for k in res if k.startswith(("param:generator", "state:generator"))]
    assert dstep.info["rng_advance"] == {"noise": (2 if dist == "normal" else 1) * B * 3}

    # G step: backpropagate through the frozen discriminator into the generator only
    gstep = build_gan_step(spec, "generator", B, "reference", "debug", dtype="f64")
    gfd = {k: v for k, v in fd.items() if k != "x"}
    res = run_numpy(gstep, gfd, ref.impl)
    nets = torch_nets(spec, fd)
    fake_logit = nets["discriminator"](nets["generator"](z))
    _, g_loss = torch_losses(loss, fake_logit, fake_logit)
    g_loss.backward()
    np.testing.assert_allclose(res["loss"], g_loss.item(), rtol=1e-10)
    np.testing.assert_allclose(res["d_fake"], fake_logit.mean().item(), rtol=1e-10)
    assert check_grads(res, gfd, nets, "generator", keys["generator"]) == 6
    assert not [k for k in res if k.startswith(("param:discriminator", "state:discriminator"))]
    assert {l.name for l in gstep.leaves if l.role == "optimizer_state"} == set()   # SGD without momentum


@pytest.mark.parametrize("clip", ["clip_grad_norm = 0.5", "clip_grad_value = 0.05"])
def test_clipping_per_network_matches_torch(clip, ref):
    spec = spec_of(extra=f"[recipe.discriminator]\n{clip}\n")
    assert spec.recipe["generator"]["clip_grad_norm"] is None and spec.recipe["generator"]["clip_grad_value"] is None
    step = build_gan_step(spec, "discriminator", B, "reference", "debug", dtype="f64")
    fd = feeds_for(step, spec, np.random.default_rng(5))
    res = run_numpy(step, fd, ref.impl)
    nets = torch_nets(spec, fd)
    fake = nets["generator"](t(noise(11, POS, (B, 3), "normal"))).detach()
    d_loss, _ = torch_losses("non_saturating", nets["discriminator"](t(fd["x"])), nets["discriminator"](fake))
    d_loss.backward()
    params = list(nets["discriminator"].parameters())
    raw = [p.grad.clone() for p in params]
    if "norm" in clip:
        total = torch.nn.utils.clip_grad_norm_(params, 0.5)
        assert total.item() > 0.5                                   # the clip is active
    else:
        torch.nn.utils.clip_grad_value_(params, 0.05)
        assert any((r.abs() > 0.05).any() and (r.abs() < 0.05).any() for r in raw)   # some clamped, some not
    keys = [n.key for n in spec.graphs["discriminator"].spec.nodes]
    check_grads(res, fd, nets, "discriminator", keys)


def test_frozen_weights_are_read_not_written_and_noise_is_fresh_each_step(ref):
    spec = spec_of()
    step = build_gan_step(spec, "discriminator", B, "reference", "debug")
    trained = set(step.param_names)
    frozen = set(step.info["frozen"])
    assert trained == {f"discriminator/{p.name}" for p in spec.graphs["discriminator"].params}
    assert frozen == {f"generator/{p.name}" for p in spec.graphs["generator"].params}
    assert {l.name for l in step.leaves if l.role == "parameter"} == trained | frozen
    outs = {o.split(":", 1)[1] for o in step.outputs if o.startswith("param:")}
    assert outs == trained and not (outs & frozen)
    # the same step with the noise position moved on gives another loss (fresh noise), the same position the same
    fd = feeds_for(step, spec, np.random.default_rng(0))
    fd = {k: (v.astype(np.float32) if k != "rng:noise" else v) for k, v in fd.items()}
    a = run_numpy(step, fd, ref.impl)["loss"]
    b = run_numpy(step, dict(fd, **{"rng:noise": base_words(POS + 30)}), ref.impl)["loss"]
    c = run_numpy(step, fd, ref.impl)["loss"]
    assert a == c and a != b


def test_a_step_of_a_one_model_spec_is_refused():
    one = sc.Spec.from_text('[data]\ndataset = "iris"\n[model]\nnodes = [{ op = "linear", out = 3 }]\n')
    with pytest.raises(sc.ScellisError, match="not a GAN spec"):
        build_gan_step(one, "generator", 4, "reference", "debug")
    with pytest.raises(sc.ScellisError, match="did you mean 'generator'"):
        build_gan_step(spec_of(), "generater", 4, "reference", "debug")
