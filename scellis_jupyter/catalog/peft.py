"""What a PEFT entry hands the training-step builder: which weights train, new adapter weights, and how
the forward sees each weight.

Why one small contract: LoRA, QLoRA, IA3, BitFit, prompt and prefix tuning all reduce to (a) a set of base
parameters that keep training, (b) adapter parameters with their initializers, (c) per-weight transforms
(the effective weight the layer uses, e.g. W + s·B·A), (d) base weights stored in another format
(QLoRA's NF4 codes), and (e) per-node forward hooks for methods that change a layer's inputs. The builder
applies exactly this, so an adapter's memory saving is planned from the Program it really runs.
"""
from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..graph.params import ParamDecl
from .registry import CatalogError, Param
from ..graph import functional as F
from ..graph.quantize import quantize
from .registry import peft as _decorator
from .registry import peft as decorator


@dataclass(frozen=True)
class StoredAs:
    """A frozen base weight kept in another format: the leaves that hold it and how to rebuild it.

    leaves: (suffix, shape, dtype) per stored tensor, placed as placeholders named `<param>.<suffix>`;
    encode(array f32) -> {suffix: array} makes them from a float weight (numpy, host side);
    decode({suffix: Node}) -> Node gives the weight the forward uses (graph ops).
    """

    fmt: str
    leaves: tuple
    encode: Callable
    decode: Callable


@dataclass
class Adaptation:
    trainable: set = field(default_factory=set)          # base parameter names that keep training
    new_params: list = field(default_factory=list)       # list[ParamDecl]: adapter weights (they train)
    transforms: dict = field(default_factory=dict)       # base name -> fn(base Node, params dict) -> Node
    stored: dict = field(default_factory=dict)           # base name -> StoredAs
    node_hooks: dict = field(default_factory=dict)       # node key -> fn(inputs, local params, forward) -> Node
    info: dict = field(default_factory=dict)             # e.g. {"factor": trainable fraction}


def match(names, patterns) -> list[str]:
    """Names matching any glob pattern (an exact name matches itself)."""
    pats = [patterns] if isinstance(patterns, str) else list(patterns)
    return [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in pats)]


def weight_targets(graph, targets=None) -> list[ParamDecl]:
    """Adapter targets: 2-D weights of linear projections (role 'weight'), filtered by `targets` globs."""
    ws = [p for p in graph.params if p.role == "weight" and len(p.shape) == 2]
    if targets:
        keep = set(match([p.name for p in ws], targets))
        ws = [p for p in ws if p.name in keep]
    return ws


# ---- helpers entries share ---------------------------------------------------------------------------
__all__ = ["Adaptation", "StoredAs", "ParamDecl", "match", "weight_targets", "adapter_name", "count",
           "with_factor", "nf4_storage", "node_keys", "attrs_of", "lora_pairs", "lora_transform", "lora_adaptation",
           "LORA_PARAMS",
           "targets_param", "select_weights", "is_default_targets", "SPEC_FILLED"]


def adapter_name(base: str, suffix: str) -> str:
    """`<node>.<path>.weight` -> `<node>.<path>.<suffix>`: under the node prefix, so the layer sees it."""
    head, _, _ = base.rpartition(".")
    return f"{head}.{suffix}" if head else suffix


def count(graph, adapt: Adaptation) -> tuple[int, int]:
    """(trainable, total) parameter counts: base params in `trainable` plus every new adapter param, over
    all base plus adapter params (the numbers `info['factor']` is the ratio of)."""
    size = {p.name: math.prod(p.shape) for p in graph.params}
    new = sum(math.prod(p.shape) for p in adapt.new_params)
    tr = sum(size[n] for n in adapt.trainable if n in size and n not in adapt.stored) + new
    return tr, sum(size.values()) + new


def with_factor(graph, adapt: Adaptation, **extra) -> Adaptation:
    """Fill `info` with the trainable fraction (and counts) plus method-specific entries."""
    tr, total = count(graph, adapt)
    adapt.info.update({"factor": tr / max(total, 1), "trainable_params": tr, "total_params": total, **extra})
    return adapt


def nf4_storage(shape: tuple, block: int = 64) -> StoredAs:
    """A frozen weight kept as NF4 codes (i8, two per byte) and per-block f32 absmax (QLoRA)."""
    n = math.prod(shape)
    shape = tuple(shape)

    def encode(w):
        q = quantize(np.asarray(w, np.float32).reshape(shape), "nf4", block)
        return {"codes": q.codes, "absmax": q.absmax}

    def decode(parts):
        return F.nf4_dequant(parts["codes"], parts["absmax"], shape, block)
    return StoredAs("nf4", (("codes", ((n + 1) // 2,), "i8"), ("absmax", (-(-n // block),), "f32")), encode, decode)


def node_keys(graph, ops=None) -> list[str]:
    """Keys of the nodes the output needs, in order (optionally only those whose op is in `ops`)."""
    out = []
    for i in graph.needed:
        n = graph.spec.nodes[i]
        if ops is None or n.op in ops:
            out.append(n.key)
    return out


def attrs_of(graph, key: str) -> dict:
    """A node's resolved attrs (defaults filled), for hooks that recompute a layer."""
    for n in graph.spec.nodes:
        if n.key == key:
            return dict(n.attrs)
    raise CatalogError(f"no node {key!r} in the model", where="peft")


def select_weights(graph, targets) -> list[ParamDecl]:
    """2-D linear weights named by `targets`. Each target is 'linear' (the spec's default: every linear
    projection, inside attention and blocks too), another op name (the weights of every node of that
    op), a node's name or key such as "logits" or "0.linear" (that node's weights), or else a glob over
    parameter names. None: every 2-D linear weight.

    A weight's node is the one that declared it (graph.node_params), not a guess from its name: a named
    node's parameters are `<name>.<param>`, so the first two name parts are not its key."""
    ws = weight_targets(graph, None)
    if not targets:
        return ws
    owner = {p.name: key for key, ps in graph.node_params.items() for p in ps}
    op_of = {n.key: n.op for n in graph.spec.nodes}
    ops = set(op_of.values())
    keep: set[str] = set()
    for t in targets:
        if t == "linear":
            keep |= {p.name for p in ws}
        elif t in ops or t in op_of:
            keep |= {p.name for p in ws if op_of.get(owner.get(p.name)) == t or owner.get(p.name) == t}
        else:
            keep |= set(match([p.name for p in ws], [t]))
    return [p for p in ws if p.name in keep]


def is_default_targets(targets) -> bool:
    """The spec fills targets = ["linear"] for every method: that means "the method's default"."""
    return not targets or tuple(targets) == ("linear",)


# hyperparameters the spec's [recipe.peft] table fills for every method (schema defaults); entries that do
# not use them accept and ignore them, so `peft = { method = "bitfit" }` works from a spec
SPEC_FILLED = {
    "rank": Param(int, 8, lo=1, hi=4096, doc="unused by this method (filled by the spec)"),
    "alpha": Param(float, 16.0, lo=0.0, lo_open=True, doc="unused by this method (filled by the spec)"),
    "dropout": Param(float, 0.0, lo=0.0, hi=0.0, doc="unused by this method; only 0"),
    "targets": Param(list, None, optional=True, doc="unused by this method (filled by the spec)"),
}


def lora_pairs(graph, rank: int, targets, init_a: str = "kaiming_uniform") -> list[tuple]:
    """(weight decl, A decl, B decl) per target: A (r, in) random, B (out, r) zeros."""
    ws = select_weights(graph, list(targets) if targets else None)
    if targets and not ws:
        names = [p.name for p in graph.params if p.role == "weight" and len(p.shape) == 2]
        raise CatalogError(f"targets {list(targets)} match no 2-D linear weight", where="peft lora",
                           hint=f"weights are: {', '.join(names[:8])}" if names else "the model has no linear weight")
    out = []
    for w in ws:
        o, i = w.shape
        a = ParamDecl(adapter_name(w.name, "lora_A"), (rank, i), init_a, i, rank, "adapter")
        b = ParamDecl(adapter_name(w.name, "lora_B"), (o, rank), "zeros", rank, o, "adapter")
        out.append((w, a, b))
    return out


def lora_transform(a_name: str, b_name: str, scale: float):
    """fn(W, params) -> W + scale · B · A (the weight the layer uses)."""

    def fn(w, params):
        delta = F.matmul(params[b_name], params[a_name])
        return F.add(w, F.mul(delta, scale))
    return fn


# LoRA's and QLoRA's shared hyperparameters
LORA_PARAMS = {
    "rank": Param(int, 8, lo=1, hi=4096, doc="r: inner dimension of B·A"),
    "alpha": Param(float, 16.0, lo=0.0, lo_open=True, doc="the update is scaled by alpha / r"),
    "dropout": Param(float, 0.0, lo=0.0, hi=0.0, doc="adapter-input dropout; only 0 (a weight transform "
                                                    "never sees the layer input)"),
    "targets": Param(list, None, optional=True, doc="op names, node names or globs over param names (see "
                     "peft.select_weights); default every 2-D linear weight"),
}


def lora_adaptation(graph, rank: int, alpha: float, targets, stored: Callable | None = None) -> Adaptation:
    """LoRA on each target weight W: adapters A (r, in), B (out, r) and W + (alpha / r)·B·A as the weight
    the layer uses; info['lora'] is what merge_lora folds back (weight -> (A, B, scale)). `stored(W decl)`
    -> StoredAs keeps the frozen base in another format (QLoRA's NF4)."""
    ad = Adaptation()
    scale = alpha / rank
    pairs = lora_pairs(graph, rank, targets)
    for w, a, b in pairs:
        ad.new_params += [a, b]
        ad.transforms[w.name] = lora_transform(a.name, b.name, scale)
        if stored is not None:
            ad.stored[w.name] = stored(w)
    ad.info["lora"] = {w.name: (a.name, b.name, scale) for w, a, b in pairs}
    return ad


def targets_param(targets):
    """The `targets` hyperparameter as a tuple of glob strings (None: the method's default)."""
    if targets is None:
        return None
    bad = [t for t in targets if not isinstance(t, str)]
    if bad:
        raise CatalogError(f"targets must be glob strings, got {bad[0]!r}", where="peft",
                           hint='e.g. targets = ["*.attn.q.weight", "*.attn.v.weight"]')
    return tuple(targets)


# ---- `from scellis_jupyter.catalog import peft` ------------------------------------------------------
# Importing this submodule binds it as the package attribute `peft`, over the registry's `@peft` decorator
# of the same name. The module is made callable as that decorator, so `@peft("name", ...)` works from
# either import and the helpers above stay reachable as `peft.match`, `peft.Adaptation`, ...
import sys as _sys  # noqa: E402
import types as _types  # noqa: E402


class _PeftModule(_types.ModuleType):
    def __call__(self, name: str, summary: str = "", params: dict | None = None, *, check: bool | None = None):
        return _decorator(name, summary, params, check=check)


_sys.modules[__name__].__class__ = _PeftModule


# `scellis_jupyter.catalog.peft` is both this module and the entry decorator (`from scellis_jupyter.catalog
# import peft; @peft("lora", ...)`). Importing from this module rebinds the package attribute to the module,
# so the module is made callable as the decorator: either object a user ends up with works the same.
class _DecoratorModule(__import__("types").ModuleType):
    def __call__(self, *args, **kwargs):
        return decorator(*args, **kwargs)


__import__("sys").modules[__name__].__class__ = _DecoratorModule
