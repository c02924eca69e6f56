"""The training-step Program: forward, loss, autodiff backward, clipping and the optimizer update.

Why one Program: DESIGN's pipeline plans and runs exactly this schedule, so the memory plan is the
liveness of the very kernels a step dispatches. Every input is a placeholder (parameters, optimizer
state, the batch, the scheduled LR, the step count, the loss scale), so the Program compiles once per
(spec, batch size, device, options) and a step only binds data; new weights and state are written over
the old ones (donated outputs), as an in-place optimizer would.

`StepOptions` holds what the planner's fixes change: activation checkpointing (segments recomputed in
the backward), precision (mixed-f16: f16 weights and compute, f32 master weights, a loss scale, and a
skipped update when a gradient is not finite), sharded optimizer state (this rank's share only) and
layer relay (this stage's layers only).
"""
from __future__ import annotations

import numpy as np
import math
from dataclasses import dataclass, field

from .. import dtypes as dt
from ..errors import ScellisError
from ..graph import functional as F
from ..graph.draws import StepGenerator
from ..graph.autodiff import grad
from ..graph.node import Node, scope, toposort
from . import partition
from .recompute import checkpointed_grads
from .options import (CHECKPOINTING, DATA_PLACEMENTS, PRECISIONS, StepOptions, with_options,  # noqa: F401
                      _peft_items)
from .schedule import Program, compile_program
from .update import all_finite, clip_grads, donated, optimizer_update  # noqa: F401 - imported from here too
from ..catalog.losses import recipe_loss as of_recipe
from ..catalog.losses import target_of
from ..catalog.losses import loss_value, make_loss
from ..catalog.regularizers import RegContext, regularization_of
from ..data import load_dataset
from ..rng.generator import Generator
from ..catalog import make


@dataclass
class Leaf:
    name: str
    role: str           # "parameter" | "master_weights" | "optimizer_state" | "data" | "scalar"
    node: Node


@dataclass
class TrainStep:
    program: Program
    leaves: list[Leaf]                      # in the Program's leaf order
    outputs: list[str]                      # "loss" (or "act_out"), "grad_in", "finite", "param:<n>", ...
    roles: dict[int, str]                   # value index -> "activations" | "gradients" | "workspace"
    batch_size: int
    param_names: list[str]
    options: StepOptions = field(default_factory=StepOptions)
    info: dict = field(default_factory=dict)

    def leaf_bytes(self, role: str) -> int:
        return sum(dt.nbytes(l.node.shape, l.node.dtype) for l in self.leaves if l.role == role)


def recipe_loss(spec):
    """The recipe's loss as a catalog instance (`recipe.loss` names it, `recipe.loss_params` configure it)."""
    task = spec.dataset.task if spec.dataset is not None else "classification"
    return of_recipe(spec.recipe, "mse" if task == "regression" else "cross_entropy")


def target_spec(spec, graph, loss=None):
    """What the loss compares the model output with (catalog.losses.Target), per example."""
    return target_of(loss if loss is not None else recipe_loss(spec), tuple(graph.output_shape))


def loss_node(loss, pred: Node, y: Node | None) -> Node:
    """The loss (a catalog name, a {name, **params} dict, or an instance) on pred and y, reduced in f32."""
    return loss_value(make_loss(loss), pred, y)


def _mixed_loss(loss, pred: Node, pairs: list) -> Node:
    """sum_i w_i L(pred, t_i) over (weight, target) pairs; one pair of weight 1 is just L(pred, y)."""
    total = None
    for w, t in pairs:
        term = loss_value(loss, pred, t)
        if not (isinstance(w, (int, float)) and w == 1.0):
            term = F.mul(term, F.cast(w, term.dtype) if isinstance(w, Node) else float(w))
        total = term if total is None else F.add(total, term)
    return total


def build_train_step(spec, batch_size: int, backend: str, tier: str, optimizer=None,
                     training: bool = True, options: StepOptions | None = None) -> TrainStep:
    """Build (and compile) the step Program of `spec` for `batch_size` on `backend`."""
    graph = spec.graph
    inp = spec.input
    b = int(batch_size)
    if b < 1:
        raise ScellisError(f"batch size must be at least 1, got {batch_size}", code="plan", where="batch_size")
    opts = options or StepOptions.from_spec(spec)
    opt_cfg = dict(spec.recipe.get("optimizer") or {"name": "adamw"})
    if optimizer is None:
        optimizer = make("optimizer", opt_cfg.pop("name"), **opt_cfg)
    opt = optimizer
    mixed = opts.precision == "mixed-f16"
    wdt = "f16" if mixed else "f32"
    stage, stages = opts.relay
    stage_nodes = partition.relay_stages(graph, stages)[stage] if stages > 1 else graph.needed
    first, last = stage == 0, stage == stages - 1
    key = {i: graph.spec.nodes[i].key for i in graph.order}
    stage_params = [p for i in stage_nodes for p in graph.node_params[key[i]]]
    leaves_meta: dict[int, tuple[str, str]] = {}

    # ---- inputs ---------------------------------------------------------------------------------
    k = opts.accum
    if k > 1 and stages > 1:
        raise ScellisError("gradient accumulation across a layer relay is not supported", code="plan",
                           where="recipe.grad_accum_steps", hint="use one of the two")
    rows = None
    if first and opts.data == "device":
        # the whole dataset is a resident leaf; a step gathers its batch by row ids (no upload per step)
        n = dataset_rows(spec)
        table = F.placeholder((n,) + tuple(inp["shape"]), inp["dtype"], "data.x")
        rows = F.placeholder((k * b,), "i32", "batch_rows")
        leaves_meta[table.id], leaves_meta[rows.id] = ("data.x", "data"), ("batch_rows", "data")
        x = F.index_select(table, 0, rows)
        x_in = F.cast(x, "f16") if mixed and x.dtype == "f32" else x
    elif first:
        x = F.placeholder((k * b,) + tuple(inp["shape"]), inp["dtype"], "x")
        leaves_meta[x.id] = ("x", "data")
        x_in = F.cast(x, "f16") if mixed and x.dtype == "f32" else x
    else:
        j = graph.needed.index(stage_nodes[0]) - 1
        prev = graph.needed[j]
        x = F.placeholder((b,) + tuple(graph.shapes[key[prev]]), wdt, "act_in")
        leaves_meta[x.id] = ("act_in", "data")
        x_in = x
    lr = F.placeholder((), "f32", "lr")
    step = F.placeholder((), "f32", "step")
    leaves_meta[lr.id], leaves_meta[step.id] = ("lr", "scalar"), ("step", "scalar")
    scale = None
    if mixed:
        scale = F.placeholder((), "f32", "loss_scale")
        leaves_meta[scale.id] = ("loss_scale", "scalar")
    adapt = opts.adaptation(graph)
    hooks = adapt.node_hooks if adapt else None
    if adapt is not None:
        in_stage = {i for i in stage_nodes}
        stage_keys = {key[i] + "." for i in in_stage}
        stage_params = stage_params + [p for p in adapt.new_params if any(p.name.startswith(k) for k in stage_keys)]
    params: dict[str, Node] = {}
    base_of: dict[str, Node] = {}
    for p in stage_params:
        stored = adapt.stored.get(p.name) if adapt else None
        if stored is not None:           # a frozen weight kept in another format (QLoRA: NF4 codes)
            parts = {}
            for suffix, shape, dtype in stored.leaves:
                leaf = F.placeholder(tuple(shape), dtype, f"{p.name}.{suffix}")
                leaves_meta[leaf.id] = (f"{p.name}.{suffix}", "parameter")
                parts[suffix] = leaf
            params[p.name] = stored.decode(parts)
        else:
            params[p.name] = F.placeholder(p.shape, wdt, p.name)
            leaves_meta[params[p.name].id] = (p.name, "parameter")
        base_of[p.name] = params[p.name]
    if adapt is not None:
        trainable = set(adapt.trainable) | {p.name for p in adapt.new_params}
        names = [n for n in params if n in trainable and n not in adapt.stored]
        for n, fn in adapt.transforms.items():
            if n in params:
                params[n] = fn(base_of[n], base_of)
        info_peft = dict(adapt.info)
    else:
        names = list(params)
        info_peft = None

    gen = StepGenerator(int(spec.recipe.get("seed") or 0))

    # ---- the loss, its target, and the regularizers --------------------------------------------
    loss = eval_loss = recipe_loss(spec)
    loss_name = getattr(loss, "name", type(loss).__name__)
    target = target_spec(spec, graph, loss)
    reg = regularization_of(spec.recipe.get("regularizers"),
                            RegContext(graph, loss, target, k * b, tuple(inp["shape"]), inp["dtype"], tuple(names)))
    if reg.loss_params:
        loss = make_loss({"name": loss_name, **dict(getattr(loss, "config", {}) or {}), **reg.loss_params})
        target = target_spec(spec, graph, loss)
    if getattr(loss, "reduction", "mean") == "none":
        raise ScellisError(f"loss {loss_name!r} with reduction 'none' gives one loss per element; a training "
                           f"step needs a number", code="plan", where="recipe.loss", hint='use reduction = "mean"')
    y = None
    if last and target.kind != "none" and rows is not None:
        ytab = F.placeholder((table.shape[0],) + target.shape, target.dtype, "data.y")
        leaves_meta[ytab.id] = ("data.y", "data")
        y = F.index_select(ytab, 0, rows)
    elif last and target.kind != "none":
        y = F.placeholder((k * b,) + target.shape, target.dtype, "y")
        leaves_meta[y.id] = ("y", "data")
    reg_in: dict[str, Node] = {}
    for si in reg.inputs:
        reg_in[si.name] = F.placeholder(tuple(si.shape), si.dtype, si.name)
        leaves_meta[reg_in[si.name].id] = (si.name, "data")
    pairs = [(1.0, y)]                       # the loss is sum_i w_i L(pred, t_i) over these
    if reg.mix is not None:
        if stages > 1:
            raise ScellisError("a batch-mixing regularizer (mixup, cutmix) across a layer relay is not supported",
                               code="plan", where="recipe.regularizers", hint="use one of the two")
        x_in, pairs = reg.mix(x_in, y, reg_in)
    buffers: dict[str, Node] = {}
    new_buffers: dict[str, Node] = {}
    for bd in reg.buffers:
        if bd.param not in params:
            continue                         # another relay stage's weight
        buffers[bd.leaf] = F.placeholder(tuple(bd.shape), bd.dtype, bd.leaf)
        leaves_meta[buffers[bd.leaf].id] = (bd.leaf, "buffer")
    for pname, fn in reg.transforms.items():
        if pname not in params:
            continue
        mine = {bd.slot: buffers[bd.leaf] for bd in reg.buffers if bd.param == pname}
        params[pname], upd = fn(params[pname], mine, training)
        new_buffers.update({f"{pname}.{slot}": v for slot, v in upd.items()})

    def loss_of(pred, target_pairs=None):
        with scope("loss"):
            loss_v = _mixed_loss(loss, pred, pairs if target_pairs is None else target_pairs)
            return F.mul(loss_v, scale) if mixed else loss_v

    # ---- forward and backward -------------------------------------------------------------------
    info: dict = {}
    grad_in = act_out = None
    if stages == 1:
        # k micro-batches, each after the previous one's gradients (control inputs), so only one
        # micro-batch's activations are alive at a time; gradients and the loss are their means
        forward_ids, losses, grads, prev = set(), [], None, ()
        for j in range(k):
            xj, yj = x_in, pairs
            if k > 1:
                xj = _rows(x_in, j * b, (j + 1) * b)
                yj = [(w, None if t is None else _rows(t, j * b, (j + 1) * b)) for w, t in pairs]
                xj.after = prev
            if opts.checkpointing == "activations":
                sj, pred, pg, rinfo = checkpointed_grads(graph, xj, params, names,
                                                         lambda p, t=yj: loss_of(p, t), gen, training,
                                                         opts.segment, hooks)
                forward_ids |= {n.id for n in toposort([pred], cut_realized=False)} | {sj.id}
                forward_ids |= rinfo.pop("replay_ids")
                info["recompute"] = rinfo
                gj = [pg.get(n) for n in names]
                # gradients wrt a regularizer-transformed weight (spectral norm's W / sigma) go back
                # through the transform to the trained leaf
                gj = [grad([params[n]], [base_of[n]], grad_outputs=[g])[0]
                      if g is not None and n in reg.transforms and params[n] is not base_of[n] else g
                      for g, n in zip(gj, names)]
            else:
                vals = {-1: xj}
                for i in stage_nodes:
                    vals[i] = graph.node_forward(i, [vals[d] for d in graph.deps[i]], params, training, gen.stream,
                                                 hooks)
                sj = loss_of(vals[stage_nodes[-1]], yj)
                gj = grad([sj], [base_of[n] for n in names])
                forward_ids |= {n.id for n in toposort([sj], cut_realized=False)}
            gj = [g if g is not None else F.zeros(base_of[n].shape, wdt) for g, n in zip(gj, names)]
            grads = gj if grads is None else [F.add(a, g) for a, g in zip(grads, gj)]
            losses.append(sj)
            prev = tuple(grads)          # the running sums: each micro-batch's gradients die once added
        scaled = losses[0]
        for extra in losses[1:]:
            scaled = F.add(scaled, extra)
        if k > 1:
            scaled = F.mul(scaled, 1.0 / k)
            grads = [F.mul(g, 1.0 / k) for g in grads]
    else:
        vals = {-1: x_in} if first else {graph.needed[graph.needed.index(stage_nodes[0]) - 1]: x_in}
        for i in stage_nodes:
            vals[i] = graph.node_forward(i, [vals[d] for d in graph.deps[i]], params, training, gen.stream, hooks)
        out = vals[stage_nodes[-1]]
        wrt = [base_of[n] for n in names] + ([] if first else [x])
        if last:
            scaled = loss_of(out)
            gs = grad([scaled], wrt)
        else:
            act_out = out
            g_out = F.placeholder(out.shape, out.dtype, "grad_out")
            leaves_meta[g_out.id] = ("grad_out", "data")
            gs = grad([out], wrt, grad_outputs=[g_out])
            scaled = None
        forward_ids = {n.id for n in toposort([out], cut_realized=False)}
        if scaled is not None:
            forward_ids.add(scaled.id)
        grads = gs[:len(names)]
        if not first:
            grad_in = gs[-1] if gs[-1] is not None else F.zeros(x.shape, x.dtype)
    grads = [g if g is not None else F.zeros(base_of[n].shape, wdt) for g, n in zip(grads, names)]

    # ---- gradients in f32: unscale, finiteness, clipping ----------------------------------------
    # a step whose gradients hold inf/NaN is skipped (weights and state kept) and reported: `finite`
    finite = None
    if mixed:
        inv = F.reciprocal(scale)
        grads = [F.mul(F.cast(g, "f32"), inv) for g in grads]
    if opts.guard or mixed:
        with scope("guard"):
            finite = all_finite(grads)
    grad_ids = {g.id for g in grads}
    with scope("clip"):
        grads = clip_grads(grads, spec.recipe.get("clip_grad_norm"), spec.recipe.get("clip_grad_value"), grad_ids)

    # ---- outputs: loss / relay tensors, then the updates this rank owns -------------------------
    outs, out_names, donate = [], [], {}
    if scaled is not None:
        outs.append(F.mul(scaled, F.reciprocal(scale)) if mixed else scaled)
        out_names.append("loss")
    else:
        outs.append(act_out)
        out_names.append("act_out")
    if grad_in is not None:
        outs.append(grad_in)
        out_names.append("grad_in")
    if finite is not None:
        outs.append(finite)
        out_names.append("finite")
    rank, world = opts.shard
    sizes = {n: dt.nbytes(base_of[n].shape, "f32") for n in names}
    owner = partition.shard_owner(sizes, world) if world > 1 else {n: 0 for n in names}
    owned = [n for n in names if owner[n] == rank]
    gmap = dict(zip(names, grads))
    rates: dict[str, Node] = {}
    # last layer first: the scheduler then takes each layer's weight gradients as soon as the backward
    # reaches that layer (as eager frameworks do), so its activations die there instead of at the end
    for n in reversed(names):
        if n not in owned:                  # another rank's: its gradient is sent (reduce-scatter)
            outs.append(gmap[n])
            out_names.append(f"grad:{n}")
            continue
        p, g = base_of[n], gmap[n]
        if mixed:
            master = F.placeholder(p.shape, "f32", f"{n}.master")
            leaves_meta[master.id] = (f"{n}.master", "master_weights")
        else:
            master = p
        if reg.grad_hook is not None:
            g = reg.grad_hook(n, g, master)
        decay = (lambda new, n=n, master=master: reg.decay(n, new, master, lr)) if reg.decay is not None else None
        with scope("optimizer"):
            new_m, st, new_st = optimizer_update(opt, n, master, g, step, lr, finite, leaves_meta, decay=decay)
        if mixed:
            donated(outs, out_names, donate, master, new_m, f"master:{n}")
            donated(outs, out_names, donate, p, F.cast(new_m, "f16"), f"param:{n}")
        else:
            donated(outs, out_names, donate, p, new_m, f"param:{n}")
        for slot, s in st.items():
            donated(outs, out_names, donate, s, new_st[slot], f"state:{n}.{slot}")
        for avg, on in (("ema", opts.ema), ("swa", opts.swa)):
            if not on:
                continue
            if avg not in rates:
                rates[avg] = F.placeholder((), "f32", f"{avg}_rate")
                leaves_meta[rates[avg].id] = (f"{avg}_rate", "scalar")
            a = F.placeholder(base_of[n].shape, "f32", f"{n}.{avg}")
            leaves_meta[a.id] = (f"{n}.{avg}", "optimizer_state")
            # avg += rate * (w - avg): rate 0 keeps it
            donated(outs, out_names, donate, a, F.add(a, F.mul(F.sub(F.cast(new_m, "f32"), a), rates[avg])),
                    f"state:{n}.{avg}")
    for leaf_name, new in new_buffers.items():        # regularizer state (spectral norm's u, v)
        old = buffers[leaf_name]
        donated(outs, out_names, donate, old, F.where(finite, new, old) if finite is not None else new,
                f"state:{leaf_name}")
    for name, base in gen.bases.items():
        leaves_meta[base.id] = (f"rng:{name}", "scalar")
    info["rng_advance"] = dict(gen.positions)       # words each stream moves per step
    prog, leaves, roles = compile_step(outs, backend, tier, donate, leaves_meta, forward_ids, grad_ids)
    if info_peft is not None:
        total = sum(math.prod(p.shape) for p in stage_params)
        tr = sum(math.prod(base_of[n].shape) for n in names)
        info_peft.setdefault("trainable_params", tr)
        info_peft.setdefault("total_params", total)
        info_peft.setdefault("factor", tr / max(total, 1))
        info["peft"] = info_peft
    info["target"] = target
    info["loss_fn"], info["eval_loss"], info["regularization"] = loss, eval_loss, reg
    info["examples"] = _examples(target, reg, k * b)
    info.update({"optimizer": type(opt).__name__, "loss": loss_name, "owned": owned,
                 "stage_nodes": [key[i] for i in stage_nodes],
                 "classes": int(graph.output_shape[-1]) if y is not None and y.dtype == "i32" else None})
    return TrainStep(prog, leaves, out_names, roles, b, names, opts, info)


def dataset_rows(spec) -> int:
    """Rows of the spec's dataset (what a device-resident dataset holds): from its metadata, else counted."""
    info = spec.dataset
    if info is not None and info.n_rows:
        return int(info.n_rows)
    return len(load_dataset(None, spec.data, spec.base_dir))


def _examples(target, reg, batch: int) -> dict:
    """Valid synthetic values for the step's data leaves (the planner's measured step, conformance checks):
    targets the loss accepts, regularizer inputs as the regularizer draws them, normalized buffers."""

    def drawn(name: str):
        return lambda rng: reg.draw(Generator(int(rng.integers(1 << 30))).stream("augment"))[name]

    def unit(shape: tuple):
        def make(rng):
            v = rng.standard_normal(shape)
            return (v / np.linalg.norm(v)).astype(np.float32)
        return make

    ex = {}
    if target.kind != "none":
        ex["y"] = lambda rng: target.example(rng, batch)
    for si in reg.inputs:
        ex[si.name] = drawn(si.name)
    for bd in reg.buffers:
        ex[bd.leaf] = unit(tuple(bd.shape))
    return ex


def compile_step(outs: list, backend: str, tier: str, donate: dict, meta: dict, forward_ids: set,
                 grad_ids: set) -> tuple[Program, list[Leaf], dict[int, str]]:
    """Compile a step's outputs; name its leaves from `meta` (node id -> (name, role)) and give each
    computed value the planner's role: activations (forward), gradients, or workspace."""
    prog, leaf_nodes, index = compile_program(outs, backend, tier, donate=donate, return_index=True)
    leaves = [Leaf(*meta.get(ln.id, (ln.attrs.get("name", ""), "data")), ln) for ln in leaf_nodes]
    roles: dict[int, str] = {}
    for nid, vi in index.items():
        if prog.values[vi].kind != "compute":
            continue
        role = "activations" if nid in forward_ids else "gradients" if nid in grad_ids else None
        if role and roles.get(vi) != "activations":
            roles[vi] = role
    for vi in prog.steps:
        roles.setdefault(vi, "workspace")
    return prog, leaves, roles


def _rows(t: Node, lo: int, hi: int) -> Node:
    """Rows lo:hi of the batch axis."""
    nd = len(t.shape)
    return F.slice_(t, (lo,) + (0,) * (nd - 1), (hi,) + tuple(t.shape[1:]), (1,) * nd)


def forward_adapted(graph, x: Node, leaves: dict, adapt, training: bool = False, gen_factory=None) -> Node:
    """The model's output with an Adaptation applied, from parameter leaves named as the step names them
    (stored weights as `<name>.<suffix>`): what evaluation runs with the weights the step trains."""
    params: dict[str, Node] = {}
    for name, node in leaves.items():
        params[name] = node
    if adapt is not None:
        for name, stored in adapt.stored.items():
            parts = {sfx: leaves[f"{name}.{sfx}"] for sfx, _, _ in stored.leaves}
            params[name] = stored.decode(parts)
        base = dict(params)
        for name, fn in adapt.transforms.items():
            if name in params:
                params[name] = fn(base[name], base)
    hooks = adapt.node_hooks if adapt is not None else None
    vals = {-1: x}
    for i in graph.needed:
        vals[i] = graph.node_forward(i, [vals[d] for d in graph.deps[i]], params, training, gen_factory, hooks)
    return vals[graph.output]
