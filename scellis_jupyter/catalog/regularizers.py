"""What a regularizer entry hands the training-step builder, and the regularizer conformance suite.

Why one small contract: mixup, cutmix, label smoothing, weight decay and spectral norm touch different
places of a step, but each is one of: (a) per-step inputs the loop draws on the host from the Philox
`augment` stream and feeds (mixup's lambda and permutation), so one compiled step serves every step and a
resumed run replays the same draws; (b) a mix of the batch, x -> x~ with the loss becoming
sum_i w_i L(pred, t_i); (c) loss hyperparameters (label smoothing); (d) a gradient hook before the
optimizer (L2 weight decay) or a decay after it (decoupled weight decay), usable with any optimizer;
(e) weight transforms with non-trained state (spectral norm's u and v): buffers the planner counts, the
checkpoint saves and each step updates. The builder applies exactly this, so what the plan counts is
what runs.

A regularizer entry's instance has `apply(ctx: RegContext) -> Regularization`; an entry that does not fit
the model, loss or data refuses with a CatalogError.
"""
from __future__ import annotations

from scipy.special import betaincinv
import fnmatch
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..errors import did_you_mean
from .registry import CatalogError
from ..graph import functional as F
from .registry import make


@dataclass(frozen=True)
class StepInput:
    """A per-step input drawn on the host (leaf `reg:<regularizer>.<name>`); shape includes the batch."""

    name: str
    shape: tuple
    dtype: str


@dataclass(frozen=True)
class Buffer:
    """Non-trained state beside a parameter (leaf `<param>.<slot>`, role "buffer"): planned, checkpointed."""

    param: str
    slot: str
    shape: tuple
    dtype: str = "f32"

    @property
    def leaf(self) -> str:
        return f"{self.param}.{self.slot}"


@dataclass
class RegContext:
    """What a regularizer may look at: the model graph, the loss and its target, the step's batch."""

    graph: Any
    loss: Any                   # the loss instance (`.name`, `.config` when made by name)
    target: Any                 # its Target for the model output
    batch: int                  # examples per optimizer step (micro-batches included)
    input_shape: tuple          # per-example input shape
    input_dtype: str
    trainable: tuple = ()       # names of the parameters the step trains


@dataclass
class Regularization:
    """One regularizer's contribution to the step; every field is optional."""

    inputs: list = field(default_factory=list)        # list[StepInput]
    draw: Callable | None = None                      # draw(stream) -> {input name: array}, augment stream
    mix: Callable | None = None                       # mix(x, y, inputs) -> (x~, [(weight, target), ...])
    loss_params: dict = field(default_factory=dict)   # merged into the loss's hyperparameters
    grad_hook: Callable | None = None                 # grad_hook(param name, g, w) -> g, before the optimizer
    decay: Callable | None = None                     # decay(param name, updated, before, lr) -> updated
    buffers: list = field(default_factory=list)       # list[Buffer]
    init_buffers: Callable | None = None              # init(weights {name: array}, stream) -> {leaf: array}
    transforms: dict = field(default_factory=dict)    # param -> fn(w, {slot: Node}, training) -> (w~, {slot: Node})
    info: dict = field(default_factory=dict)


# ---- helpers entries share ---------------------------------------------------------------------------
def uniform(stream, n: int) -> np.ndarray:
    """n uniforms in (0, 1), float64, one Philox word each (never exactly 0 or 1)."""
    return stream.open_uniform(n)


def beta(stream, a: float, b: float | None = None) -> float:
    """One Beta(a, b) draw by the inverse CDF of one uniform: exactly one word per draw, so the stream
    position after a step does not depend on the values drawn."""
    u = float(uniform(stream, 1)[0])
    return float(betaincinv(a, a if b is None else b, u))


def integer(stream, n: int) -> int:
    """A uniform integer in [0, n) from one word (multiply-shift; bias below n / 2^32)."""
    return int(stream.integers(1, int(n))[0])


def permutation(stream, n: int) -> np.ndarray:
    return stream.permutation(int(n)).astype(np.int32)


def blend(x, perm, keep):
    """x * keep + x[perm] * (1 - keep): each example mixed with its partner under the permutation; `keep`
    is a scalar (mixup's lam) or a mask broadcast over the example (CutMix's box)."""
    keep = F.cast(keep, x.dtype)
    return F.add(F.mul(x, keep), F.mul(F.index_select(x, 0, perm), F.sub(1.0, keep)))


def mixed_targets(y, perm, lam) -> list:
    """[(lam, y), (1 - lam, y[perm])]: a batch-mixing regularizer's loss is the weighted sum over the pairs."""
    return [(lam, y), (F.sub(1.0, lam), F.index_select(y, 0, perm))]


def weight_params(graph, layers=None, where: str = "") -> list:
    """ParamDecls of weights (role 'weight', rank >= 2) of the nodes whose key matches a `layers` glob
    (all of them when None); a glob that matches no node is refused with did-you-mean."""
    keys = [graph.spec.nodes[i].key for i in graph.order]
    if layers is not None:
        for pat in layers:
            if not fnmatch.filter(keys, pat):
                raise CatalogError(f"layer {pat!r} is not a node of this model", where=where,
                                   hint=did_you_mean(pat, keys) or f"nodes: {', '.join(keys)}")
    out = []
    for p in graph.params:
        node = p.name.rsplit(".", 1)[0]
        if p.role != "weight" or len(p.shape) < 2:
            continue
        if layers is None or any(fnmatch.fnmatchcase(node, pat) or fnmatch.fnmatchcase(p.name, pat)
                                 for pat in layers):
            out.append(p)
    return out


def compose(regs: list, names: list) -> Regularization:
    """Several regularizers as one: inputs and buffers side by side (inputs prefixed by the entry name),
    at most one batch mix, loss hyperparameters merged, hooks chained, one transform per parameter."""
    out = Regularization()
    draws = []
    for name, r in zip(names, regs):
        if r.mix is not None:
            if out.mix is not None:
                raise CatalogError(f"{name!r} and {out.info['mix']!r} both mix the batch; use one",
                                   where="recipe.regularizers")
            out.info["mix"] = name
            mix = r.mix
            out.mix = (lambda m, pre: lambda x, y, ins: m(x, y, {k[len(pre):]: v for k, v in ins.items()
                                                                 if k.startswith(pre)}))(mix, f"reg:{name}.")
        out.inputs += [StepInput(f"reg:{name}.{i.name}", tuple(i.shape), i.dtype) for i in r.inputs]
        if r.draw is not None:
            draws.append((name, r.draw))
        for k, v in r.loss_params.items():
            if k in out.loss_params and out.loss_params[k] != v:
                raise CatalogError(f"two regularizers set the loss's {k}", where="recipe.regularizers")
            out.loss_params[k] = v
        for hook in ("grad_hook", "decay"):
            h = getattr(r, hook)
            if h is not None:
                prev = getattr(out, hook)
                setattr(out, hook, h if prev is None else
                        (lambda a, b: lambda n, *rest: b(n, a(n, *rest), *rest[1:]))(prev, h))
        out.buffers += list(r.buffers)
        for p, fn in r.transforms.items():
            if p in out.transforms:
                raise CatalogError(f"two regularizers transform weight {p!r}", where="recipe.regularizers")
            out.transforms[p] = fn
        if r.init_buffers is not None:
            prev = out.init_buffers
            out.init_buffers = (lambda a, b: lambda w, s: {**(a(w, s) if a else {}), **b(w, s)})(prev, r.init_buffers)
        out.info[name] = dict(r.info)
    if draws:
        def draw(stream):
            got = {}
            for name, d in draws:
                got.update({f"reg:{name}.{k}": v for k, v in d(stream).items()})
            return got
        out.draw = draw
    seen = set()
    for b in out.buffers:
        if b.leaf in seen:
            raise CatalogError(f"buffer {b.leaf!r} is declared twice", where="recipe.regularizers")
        seen.add(b.leaf)
    return out


def regularization_of(recipe_regs: list, ctx: RegContext) -> Regularization:
    """The recipe's `regularizers` list ({name, **params} each) applied to ctx, composed."""
    regs, names = [], []
    for cfg in recipe_regs or []:
        cfg = {"name": cfg} if isinstance(cfg, str) else dict(cfg)
        name = cfg.pop("name")
        if name in names:
            raise CatalogError(f"regularizer {name!r} is listed twice", where="recipe.regularizers")
        r = make("regularizer", name, **cfg).apply(ctx)
        if not isinstance(r, Regularization):
            raise CatalogError(f"regularizer {name!r}: apply() returned {type(r).__name__}, not a Regularization")
        regs.append(r)
        names.append(name)
    return compose(regs, names)


# small models the checks apply each regularizer to (it may refuse some, not all); cutmix needs images


__all__ = ["StepInput", "Buffer", "RegContext", "Regularization", "uniform", "beta", "integer", "permutation",
           "blend", "mixed_targets",
           "weight_params", "compose", "regularization_of"]
