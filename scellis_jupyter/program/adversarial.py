"""The two step Programs of adversarial (GAN) training: a discriminator step and a generator step.

Why two Programs and not one: each network is updated by its own optimizer on its own loss, and user
code decides how many discriminator steps come per generator step; so each step is a training-step
Program like `training.build_train_step`'s (every input a placeholder, updates donated over the old
weights and state, clipping and a finite guard from the same pieces), and the other network enters as
frozen parameter leaves: the discriminator step reads the generator's weights to make its fakes but has
no gradient or update for them; the generator step backpropagates through the discriminator, whose
weights it reads but never writes. Autodiff only walks paths to the trained network's weights, so no
gradient of the frozen network's weights is ever computed.

Noise is drawn inside the Program from the Philox sub-stream "noise" at a position that is a step input
(`rng:noise`), so one compiled step draws fresh noise every step and a resumed run replays it exactly.
Dropout streams are named per network ("generator/dropout/<node>"), so the two never share masks.
"""
from __future__ import annotations

import math

from ..errors import ScellisError, did_you_mean
from ..graph import functional as F
from ..graph.autodiff import grad
from ..graph.node import Node, toposort
from ..graph.draws import StepGenerator
from ..spec.adversarial import GAN_LOSSES, NETWORKS
from .schedule import compile_program
from .training import (StepOptions, TrainStep, all_finite, clip_grads, compile_step, donated,
                       optimizer_update)
from ..catalog import make

NOISE_STREAM = "noise"


def other(network: str) -> str:
    return NETWORKS[1 - NETWORKS.index(network)]


def leaf_name(network: str, param: str) -> str:
    """How a network's parameter is named in steps, weights and checkpoints: 'generator/0.linear.weight'."""
    return f"{network}/{param}"


def noise_node(gen: StepGenerator, shape: tuple, dist: str = "normal", dtype: str = "f32",
               stream: str = NOISE_STREAM) -> Node:
    """Noise of `shape` from the Philox stream: N(0, 1) by Box-Muller on two uniforms u1, u2 in [0, 1)
    (z = sqrt(-2 ln(1 - u1)) cos(2 pi u2), computed in `dtype`), or uniform in [-1, 1)."""
    s = gen.stream(stream)
    if dist == "uniform":
        return F.sub(F.mul(F.cast(F.uniform_node(s, shape), dtype), 2.0), 1.0)
    if dist != "normal":
        raise ScellisError(f"noise {dist!r} is not 'normal' or 'uniform'", code="spec", where="recipe.noise",
                           hint=did_you_mean(dist, ("normal", "uniform")))
    u1 = F.cast(F.uniform_node(s, shape), dtype)
    u2 = F.cast(F.uniform_node(s, shape), dtype)
    radius = F.sqrt(F.mul(F.log(F.sub(1.0, u1)), -2.0))
    return F.mul(radius, F.cos(F.mul(u2, 2.0 * math.pi)))


def softplus(t: Node) -> Node:
    """log(1 + e^t) as m + log(e^-m + e^(t-m)) with m = max(t, 0): no overflow, and its gradient is
    sigmoid(t) everywhere (the terms through m cancel), also at t = 0."""
    m = F.relu(t)
    return F.add(m, F.log(F.add(F.exp(F.neg(m)), F.exp(F.sub(t, m)))))


def discriminator_loss(name: str, real: Node, fake: Node) -> Node:
    """The discriminator's loss on logits of real and generated examples (lower: tells them apart better)."""
    if name in ("non_saturating", "minimax"):      # -log D(x) - log(1 - D(G(z))), D = sigmoid(logit)
        return F.add(F.mean(softplus(F.neg(real))), F.mean(softplus(fake)))
    if name == "hinge":                            # Lim & Ye 2017
        return F.add(F.mean(F.relu(F.sub(1.0, real))), F.mean(F.relu(F.add(fake, 1.0))))
    if name == "least_squares":                    # Mao et al. 2017, targets b = 1 (real), a = 0 (fake)
        r1 = F.sub(real, 1.0)
        return F.mul(F.add(F.mean(F.mul(r1, r1)), F.mean(F.mul(fake, fake))), 0.5)
    raise _unknown_loss(name)


def generator_loss(name: str, fake: Node) -> Node:
    """The generator's loss on the discriminator's logits of its examples."""
    if name == "non_saturating":                   # -log D(G(z)) (Goodfellow et al. 2014, section 3)
        return F.mean(softplus(F.neg(fake)))
    if name == "minimax":                          # log(1 - D(G(z))): the original game, saturates early on
        return F.neg(F.mean(softplus(fake)))
    if name == "hinge":
        return F.neg(F.mean(fake))
    if name == "least_squares":                    # target c = 1
        f1 = F.sub(fake, 1.0)
        return F.mul(F.mean(F.mul(f1, f1)), 0.5)
    raise _unknown_loss(name)


def _unknown_loss(name: str) -> ScellisError:
    return ScellisError(f"GAN loss {name!r} has no lowering", code="spec", where="recipe.loss",
                        hint=did_you_mean(name, GAN_LOSSES) or f"use one of {', '.join(GAN_LOSSES)}")


def network_optimizer(spec, network: str):
    """The catalog optimizer of one network ([recipe.<network>] optimizer, else [recipe] optimizer)."""
    cfg = dict(spec.recipe[network]["optimizer"] or {"name": "adamw"})
    return make("optimizer", cfg.pop("name"), **cfg)


def forward(graph, x: Node, params: dict[str, Node], training: bool, gen_factory) -> Node:
    vals = {-1: x}
    for i in graph.needed:
        vals[i] = graph.node_forward(i, [vals[d] for d in graph.deps[i]], params, training, gen_factory)
    return vals[graph.output]


def build_gan_step(spec, network: str, batch_size: int, backend: str, tier: str, optimizer=None,
                   dtype: str = "f32") -> TrainStep:
    """The step Program that updates `network` ("discriminator" or "generator") of a GAN spec.

    Leaves: both networks' weights (named `leaf_name(network, param)`, role "parameter"), the trained
    network's optimizer state, the real batch `x` (discriminator step only), `lr`, `step` and the Philox
    positions `rng:<stream>`. Outputs: "loss", "d_real" (mean logit on real examples; discriminator step),
    "d_fake" (mean logit on generated ones), "finite", then `param:` / `state:` updates of the trained
    network only. dtype "f64" (reference backend) is for checking against float64 references.
    """
    if network not in NETWORKS:
        raise ScellisError(f"network {network!r} is not 'generator' or 'discriminator'", code="plan",
                           where="build_gan_step", hint=did_you_mean(network, NETWORKS))
    if getattr(spec, "kind", "supervised") != "gan":
        raise ScellisError(f"spec {spec.name!r} is not a GAN spec (kind {spec.kind!r})", code="plan",
                           where="build_gan_step", hint='set kind = "gan" with [model.generator] and '
                                                        '[model.discriminator]')
    b = int(batch_size)
    if b < 1:
        raise ScellisError(f"batch size must be at least 1, got {batch_size}", code="plan", where="batch_size")
    r = spec.recipe
    graphs = spec.graphs
    opt = optimizer if optimizer is not None else network_optimizer(spec, network)
    gen = StepGenerator(int(r.get("seed") or 0))
    meta: dict[int, tuple[str, str]] = {}
    params: dict[str, dict[str, Node]] = {}
    for net in NETWORKS:
        params[net] = {}
        for p in graphs[net].params:
            name = leaf_name(net, p.name)
            params[net][p.name] = ph = F.placeholder(p.shape, dtype, name)
            meta[ph.id] = (name, "parameter")

    def streams(net):
        return lambda s: gen.stream(f"{net}/{s}")

    lr = F.placeholder((), "f32", "lr")
    step = F.placeholder((), "f32", "step")
    meta[lr.id], meta[step.id] = ("lr", "scalar"), ("step", "scalar")
    g_graph, d_graph = graphs["generator"], graphs["discriminator"]
    z = noise_node(gen, (b,) + tuple(g_graph.input_shape), r.get("noise") or "normal", dtype)
    fake = forward(g_graph, z, params["generator"], True, streams("generator"))
    extras: dict[str, Node] = {}
    loss_name = r.get("loss") or "non_saturating"
    if network == "discriminator":
        x = F.placeholder((b,) + tuple(d_graph.input_shape), dtype, "x")
        meta[x.id] = ("x", "data")
        real = forward(d_graph, x, params["discriminator"], True, streams("discriminator"))
        fake_logit = forward(d_graph, fake, params["discriminator"], True, streams("discriminator"))
        loss = discriminator_loss(loss_name, real, fake_logit)
        extras["d_real"] = F.mean(real)
    else:
        fake_logit = forward(d_graph, fake, params["discriminator"], True, streams("discriminator"))
        loss = generator_loss(loss_name, fake_logit)
    extras["d_fake"] = F.mean(fake_logit)
    own = params[network]
    names = list(own)
    grads = grad([loss], [own[n] for n in names])
    grads = [g if g is not None else F.zeros(own[n].shape, dtype) for g, n in zip(grads, names)]
    forward_ids = {n.id for n in toposort([loss] + list(extras.values()), cut_realized=False)}

    finite = all_finite(grads)
    grad_ids = {g.id for g in grads}
    cfg = r[network]
    grads = clip_grads(grads, cfg.get("clip_grad_norm"), cfg.get("clip_grad_value"), grad_ids)

    outs, out_names, donate = [loss] + list(extras.values()), ["loss"] + list(extras), {}
    if finite is not None:
        outs.append(finite)
        out_names.append("finite")
    # last layer first: the backward reaches the last layer's weight gradients first (see training.py)
    for n, g in reversed(list(zip(names, grads))):
        p, label = own[n], leaf_name(network, n)
        new_p, st, new_st = optimizer_update(opt, label, p, g, step, lr, finite, meta, dtype)
        donated(outs, out_names, donate, p, new_p, f"param:{label}")
        for slot, s in st.items():
            donated(outs, out_names, donate, s, new_st[slot], f"state:{label}.{slot}")
    for name, base in gen.bases.items():
        meta[base.id] = (f"rng:{name}", "scalar")
    prog, leaves, roles = compile_step(outs, backend, tier, donate, meta, forward_ids, grad_ids)
    trained = [leaf_name(network, n) for n in names]
    info = {"network": network, "optimizer": type(opt).__name__, "loss": loss_name,
            "rng_advance": dict(gen.positions), "trained": trained,
            "frozen": [leaf_name(other(network), p.name) for p in graphs[other(network)].params],
            "noise": r.get("noise") or "normal", "dtype": dtype}
    return TrainStep(prog, leaves, out_names, roles, b, trained, StepOptions(), info)


def build_gan_steps(spec, batch_size: int, backend: str, tier: str, dtype: str = "f32") -> dict[str, TrainStep]:
    """Both step Programs, discriminator first (the order a round runs them)."""
    return {net: build_gan_step(spec, net, batch_size, backend, tier, dtype=dtype)
            for net in ("discriminator", "generator")}


def sample_program(spec, n: int, backend: str, tier: str, stream: str = "sample"):
    """A Program drawing `n` generator samples (eval mode) from its own Philox stream; returns
    (program, leaf names in order, words the stream advances)."""
    g = spec.graphs["generator"]
    gen = StepGenerator(int(spec.recipe.get("seed") or 0))
    params = {p.name: F.placeholder(p.shape, "f32", leaf_name("generator", p.name)) for p in g.params}
    z = noise_node(gen, (int(n),) + tuple(g.input_shape), spec.recipe.get("noise") or "normal", "f32", stream)
    out = forward(g, z, params, False, None)
    prog, leaves = compile_program([out], backend, tier)
    names = {id(v): leaf_name("generator", k) for k, v in params.items()}
    order = [names.get(id(ln)) or f"rng:{stream}" for ln in leaves]
    return prog, order, dict(gen.positions)


def generate_program(spec, n: int, backend: str, tier: str):
    """A Program mapping given noise `z` ([n, *noise shape]) through the generator (eval mode)."""
    g = spec.graphs["generator"]
    params = {p.name: F.placeholder(p.shape, "f32", leaf_name("generator", p.name)) for p in g.params}
    z = F.placeholder((int(n),) + tuple(g.input_shape), "f32", "z")
    out = forward(g, z, params, False, None)
    prog, leaves = compile_program([out], backend, tier)
    names = {id(v): leaf_name("generator", k) for k, v in params.items()}
    return prog, [names.get(id(ln), "z") for ln in leaves]

