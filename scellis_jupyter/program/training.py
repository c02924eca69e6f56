"""The training-step Program: forward, loss, autodiff backward, clipping and the optimizer update.

Why one Program: DESIGN's pipeline plans and runs exactly this schedule, so the memory plan is the
liveness of the very kernels a step dispatches. Every input is a placeholder (parameters, optimizer
state, the batch, the scheduled LR and the step count), so the Program compiles once per
(spec, batch size, device) and a step only binds data; new weights and state are written over the
old ones (donated outputs), as an in-place optimizer would.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import dtypes as dt
from ..errors import ScellisError
from ..graph import functional as F
from ..graph.autodiff import grad
from ..graph.node import Node, toposort
from .schedule import Program, compile_program

LOSSES = ("cross_entropy", "mse")   # the catalog's loss entries replace this table (issue: training stack)


@dataclass
class Leaf:
    name: str
    role: str           # "parameter" | "optimizer_state" | "data" | "scalar"
    node: Node


@dataclass
class TrainStep:
    program: Program
    leaves: list[Leaf]                      # in the Program's leaf order
    outputs: list[str]                      # "loss", then "param:<name>" / "state:<name>.<slot>"
    roles: dict[int, str]                   # value index -> "activations" | "gradients" | "workspace"
    batch_size: int
    param_names: list[str]
    info: dict = field(default_factory=dict)

    def leaf_bytes(self, role: str) -> int:
        return sum(dt.nbytes(l.node.shape, l.node.dtype) for l in self.leaves if l.role == role)


def _target(spec, graph, batch: int) -> Node:
    task = (spec.dataset.task if spec.dataset is not None else "classification")
    out = graph.output_shape
    if spec.recipe.get("loss", "cross_entropy") == "cross_entropy" or task != "regression":
        return F.placeholder((batch,) + tuple(out[:-1]), "i32", "y")
    return F.placeholder((batch,) + tuple(out), "f32", "y")


def loss_node(name: str, pred: Node, y: Node) -> Node:
    if name == "cross_entropy":
        lp = F.log_softmax(pred, -1)
        picked = F.gather(lp, len(pred.shape) - 1, F.reshape(y, tuple(y.shape) + (1,)))
        return F.neg(F.mean(picked))
    if name == "mse":
        d = F.sub(pred, F.reshape(y, pred.shape) if y.shape != pred.shape else y)
        return F.mean(F.mul(d, d))
    from ..errors import did_you_mean
    raise ScellisError(f"loss {name!r} has no training-step lowering yet", code="catalog",
                       hint=did_you_mean(name, LOSSES) or f"available: {', '.join(LOSSES)}")


def build_train_step(spec, batch_size: int, backend: str, tier: str, optimizer=None,
                     training: bool = True) -> TrainStep:
    """Build (and compile) the step Program of `spec` for `batch_size` on `backend`."""
    graph = spec.graph
    inp = spec.input
    b = int(batch_size)
    if b < 1:
        raise ScellisError(f"batch size must be at least 1, got {batch_size}", code="plan", where="batch_size")
    opt_cfg = dict(spec.recipe.get("optimizer") or {"name": "adamw"})
    if optimizer is None:
        from ..catalog import make
        optimizer = make("optimizer", opt_cfg.pop("name"), **opt_cfg)
    opt = optimizer
    x = F.placeholder((b,) + tuple(inp["shape"]), inp["dtype"], "x")
    y = _target(spec, graph, b)
    lr = F.placeholder((), "f32", "lr")
    step = F.placeholder((), "f32", "step")
    params = {p.name: F.placeholder(p.shape, "f32", p.name) for p in graph.params}
    names = list(params)
    from ..rng.generator import Generator
    gen = Generator(int(spec.recipe.get("seed") or 0))
    pred = graph.forward(x, params, training=training, gen_factory=gen.stream)
    loss = loss_node(spec.recipe.get("loss", "cross_entropy"), pred, y)
    forward_ids = {n.id for n in toposort([loss], cut_realized=False)}
    grads = grad([loss], [params[n] for n in names])
    grads = [g if g is not None else F.zeros(params[n].shape) for g, n in zip(grads, names)]
    grad_ids = {g.id for g in grads}
    clip = spec.recipe.get("clip_grad_norm")
    if clip:
        total = None
        for g in grads:
            s = F.sum_(F.mul(g, g))
            total = s if total is None else F.add(total, s)
        scale = F.minimum(F.div(float(clip), F.add(F.sqrt(total), 1e-6)), F.scalar(1.0))
        grads = [F.mul(g, scale) for g in grads]
        grad_ids |= {g.id for g in grads}
    outs, out_names, donate = [loss], ["loss"], {}
    leaves_meta = {x.id: ("x", "data"), y.id: ("y", "data"), lr.id: ("lr", "scalar"), step.id: ("step", "scalar")}
    for n, g in zip(names, grads):
        p = params[n]
        leaves_meta[p.id] = (n, "parameter")
        st = {}
        for d in opt.state(tuple(p.shape), "f32"):
            s = F.placeholder(d.shape, d.dtype, f"{n}.{d.name}")
            st[d.name] = s
            leaves_meta[s.id] = (f"{n}.{d.name}", "optimizer_state")
        new_p, new_st = opt.update(p, g, st, step, lr)
        donate[len(outs)] = p
        outs.append(new_p)
        out_names.append(f"param:{n}")
        for k, s in st.items():
            donate[len(outs)] = s
            outs.append(new_st[k])
            out_names.append(f"state:{n}.{k}")
    prog, leaf_nodes, index = compile_program(outs, backend, tier, donate=donate, return_index=True)
    leaves = []
    for ln in leaf_nodes:
        name, role = leaves_meta.get(ln.id, (ln.attrs.get("name", ""), "data"))
        leaves.append(Leaf(name, role, ln))
    roles: dict[int, str] = {}
    for nid, vi in index.items():
        if prog.values[vi].kind != "compute":
            continue
        role = "activations" if nid in forward_ids else "gradients" if nid in grad_ids else None
        if role and roles.get(vi) != "activations":
            roles[vi] = role
    for vi in prog.steps:
        roles.setdefault(vi, "workspace")
    return TrainStep(prog, leaves, out_names, roles, b, names,
                     info={"optimizer": type(opt).__name__, "loss": spec.recipe.get("loss", "cross_entropy"),
                           "classes": int(graph.output_shape[-1]) if y.dtype == "i32" else None})
