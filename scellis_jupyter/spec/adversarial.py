"""Two-network (GAN) specs: `[model.generator]` and `[model.discriminator]`, trained with `kind = "gan"`.

Why in the one spec text: both networks, the noise, the adversarial loss and each network's optimizer
are one experiment, hashed, planned and checkpointed together. What ties the two networks (the
generator's output is the discriminator's input, the discriminator scores each example with one logit)
is checked here, before compute, and reported at the line:col where the user typed it.

    [model.generator]
    input = { shape = [8] }                 # the noise the generator maps
    nodes = [ { op = "linear", out = 64 }, { op = "relu" }, { op = "linear", out = 2 } ]
    [model.discriminator]                   # its input is the data's example shape
    nodes = [ { op = "linear", out = 64 }, { op = "relu" }, { op = "linear", out = 1 } ]
    [recipe]
    kind = "gan"
    loss = "non_saturating"                 # minimax | hinge | least_squares
    noise = "normal"                        # or "uniform" in [-1, 1), from the Philox stream "noise"
    d_steps = 1                             # discriminator updates per round (user code may change it)
    optimizer = { name = "adam", lr = 2e-4, betas = [0.5, 0.999] }   # both networks ...
    [recipe.discriminator]                  # ... unless a network says otherwise
    optimizer = { name = "adam", lr = 4e-4, betas = [0.5, 0.999] }
"""
from __future__ import annotations

from .model import ModelGraph, ModelSpec, build_graph
from .entries import _check_optimizer, _check_scheduler, _named_table
from .schema import Checker, SpecError
from ..errors import Diagnostic

NETWORKS = ("generator", "discriminator")
KINDS = ("supervised", "gan")
GAN_LOSSES = ("non_saturating", "minimax", "hinge", "least_squares")
NOISES = ("normal", "uniform")
NETWORK_RECIPE_KEYS = ("optimizer", "scheduler", "clip_grad_norm", "clip_grad_value")
GAN_ONLY_KEYS = ("generator", "discriminator", "noise", "d_steps", "g_steps")
# recipe settings the GAN step does not lower (yet): the value each must keep, and why it is refused
_NEVER = object()        # a key refused whatever its value (it is not checked for GAN recipes at all)
NOT_FOR_GAN = {"precision": ("fp32", "mixed precision"), "checkpointing": ("none", "activation checkpointing"),
               "grad_accum_steps": (1, "gradient accumulation"), "peft": (None, "adapters"),
               "ema": (None, "weight averaging"), "swa_start": (None, "weight averaging"),
               "swa_every": (None, "weight averaging"), "metrics": ([], "validation metrics"),
               "eval_every": (None, "validation metrics"), "loss_scale": (_NEVER, "loss scaling"),
               "regularizers": (_NEVER, "regularizers"), "augment": (_NEVER, "augmentation"),
               "sampling": (_NEVER, "weighted sampling")}


def check_gan_recipe(ck: Checker, t: dict, path: tuple, r: dict) -> None:
    """The GAN part of [recipe] (r holds the shared keys, already checked); fills r in place."""
    for key, (keep, what) in NOT_FOR_GAN.items():
        if key in t and r.get(key) != keep:
            ck.error(path + (key,), f"{what} ({key}) is not supported with kind = \"gan\" yet", value=False,
                     kind="unsupported", hint=f"remove {key} from [recipe]")
    r["noise"] = ck.choice(t, "noise", path, NOISES, "normal", "noise distribution")
    r["d_steps"] = ck.integer(t, "d_steps", path, 1, 10 ** 4, 1)
    r["g_steps"] = ck.integer(t, "g_steps", path, 1, 10 ** 4, 1)
    for net in NETWORKS:
        p = path + (net,)
        own = {} if net not in t else ck.table(t[net], p, ' like { optimizer = { name = "adam", lr = 2e-4 } }')
        own = own or {}
        ck.known_keys(own, p, NETWORK_RECIPE_KEYS, f"[recipe.{net}]")
        cfg = {"optimizer": r["optimizer"], "scheduler": r["scheduler"],
               "clip_grad_norm": r["clip_grad_norm"], "clip_grad_value": r["clip_grad_value"]}
        if "optimizer" in own:
            cfg["optimizer"] = _named_table(ck, own, "optimizer", p, "adamw", _check_optimizer)
        if "scheduler" in own:
            cfg["scheduler"] = _named_table(ck, own, "scheduler", p, "constant", _check_scheduler)
        for k in ("clip_grad_norm", "clip_grad_value"):
            if k in own:
                cfg[k] = ck.number(own, k, p, 0.0, 1e6, None, lo_open=True)
        r[net] = cfg


def refuse_gan_keys(ck: Checker, t: dict, path: tuple) -> None:
    """GAN-only recipe keys in a recipe of another kind."""
    for key in GAN_ONLY_KEYS:
        if key in t:
            ck.error(path + (key,), f"{key!r} applies to two-network training only", value=False,
                     kind="unknown-key", hint='set kind = "gan" in [recipe] (with [model.generator] and '
                                              '[model.discriminator]), or remove it')


def check_networks(ck: Checker, t: dict, path: tuple, check_model_table) -> dict[str, ModelSpec]:
    """[model.generator] and [model.discriminator], each checked like a one-network [model]."""
    for k in t:
        if k not in NETWORKS:
            ck.error(path + (k,), f"a two-network [model] holds only [model.generator] and [model.discriminator], "
                     f"not {k!r}", value=False, kind="unknown-key",
                     hint=f"move {k} into [model.generator] or [model.discriminator]")
    models = {}
    for net in NETWORKS:
        if net not in t:
            ck.error(path, f"a two-network model needs [model.{net}]", value=False, kind="missing", key=net)
            continue
        sub = ck.table(t[net], path + (net,), ' like { nodes = [ { op = "linear", out = 1 } ] }')
        if sub is not None:
            models[net] = check_model_table(ck, sub, path + (net,))
    return models


def check_kind(ck: Checker, kind: str, models: dict, raw: dict) -> None:
    """Two networks go with kind = "gan", and kind = "gan" needs them."""
    if kind == "gan" and not models:
        ck.error(("recipe", "kind"), 'kind = "gan" trains two networks, but [model] describes one', kind="missing",
                 hint="describe them in [model.generator] and [model.discriminator]")
    elif models and kind != "gan":
        ck.error(("model", NETWORKS[0]) if NETWORKS[0] in (raw.get("model") or {}) else ("model",),
                 "a model of two networks (generator, discriminator) trains adversarially", value=False,
                 kind="missing", hint='set kind = "gan" in [recipe]')


def build_networks(ck: Checker, models: dict[str, ModelSpec], data_input: dict | None) -> dict[str, ModelGraph]:
    """Both graphs with shapes inferred; the generator maps its declared noise to the data's example shape,
    the discriminator maps that shape to one logit. Problems go to `ck` (empty dict when any)."""
    gen, disc = models["generator"], models["discriminator"]
    if gen.input is None:
        ck.error(("model", "generator"), "the generator's input (its noise) has no shape", value=False,
                 kind="missing", hint="declare input = { shape = [8] } in [model.generator]")
        return {}
    if gen.input["dtype"] != "f32":
        ck.error(("model", "generator", "input", "dtype"), f"the generator's noise must be f32, got "
                 f"{gen.input['dtype']!r}", kind="type")
        return {}
    d_in = disc.input or data_input
    if d_in is None:
        ck.error(("model", "discriminator"), "the discriminator's input shape is unknown", value=False,
                 kind="missing", hint='add [data] dataset = "..." or input = { shape = [...] } in [model.discriminator]')
        return {}
    if d_in["dtype"] != "f32":
        where = ("model", "discriminator", "input") if disc.input else ("data", "dataset")
        ck.error(where, f"a GAN generates real-valued examples, but the data is {d_in['dtype']}", kind="type",
                 hint="use a dataset of f32 features")
        return {}
    try:
        graphs = {"generator": build_graph(gen, gen.input["shape"], "f32"),
                  "discriminator": build_graph(disc, d_in["shape"], "f32")}
    except SpecError as e:
        ck.diags.append(e.diagnostic)
        return {}
    g, d = graphs["generator"], graphs["discriminator"]
    g_out = gen.nodes[g.output]
    if tuple(g.output_shape) != tuple(d_in["shape"]) or g.output_dtype != "f32":
        ck.diags.append(_at(gen, g_out, f"the generator makes examples of shape {list(g.output_shape)} "
                            f"({g.output_dtype}) but the discriminator takes {list(d_in['shape'])} (f32)",
                            f"make the generator's last node produce shape {list(d_in['shape'])}"))
    d_out = disc.nodes[d.output]
    if tuple(d.output_shape) != (1,):
        ck.diags.append(_at(disc, d_out, f"the discriminator must score each example with one logit, but it "
                            f"outputs shape {list(d.output_shape)}", "end it with { op = \"linear\", out = 1 }"))
    return graphs if not ck.diags else {}


def _at(ms: ModelSpec, node, message: str, hint: str):
    return Diagnostic("spec", message, ms.where(node), hint, {"kind": "shape"})
