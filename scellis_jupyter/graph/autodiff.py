"""Reverse-mode autodiff on the graph: each primitive's vector-Jacobian product, as more graph nodes.

Why graph-level: backward is just more of the same IR, so it is planned, fused and scheduled like the
forward pass, on every backend, with no hand-written backward kernels except attention's and the norms'
(one row kernel in place of a dozen dispatches; their second derivative goes through the composite).
"""
from __future__ import annotations

import math

from .. import dtypes as dt
from ..errors import GraphError
from . import functional as F
from .node import Node, scope, toposort
from .opset import make

VJP = {}


def rule(*names):
    def deco(fn):
        for n in names:
            VJP[n] = fn
        return fn
    return deco


def unbroadcast(g: Node, shape) -> Node:
    """Sum g over the axes that broadcasting added or stretched, to get back `shape`."""
    shape = tuple(shape)
    if tuple(g.shape) == shape:
        return g
    lead = len(g.shape) - len(shape)
    axes = list(range(lead)) + [lead + i for i, s in enumerate(shape) if s == 1 and g.shape[lead + i] != 1]
    r = F.sum_(g, tuple(axes), keepdims=True) if axes else g
    return F.reshape(r, shape)


@rule("add")
def _(n, g):
    a, b = n.inputs
    return unbroadcast(g, a.shape), unbroadcast(g, b.shape)


@rule("sub")
def _(n, g):
    a, b = n.inputs
    return unbroadcast(g, a.shape), unbroadcast(F.neg(g), b.shape)


@rule("mul")
def _(n, g):
    a, b = n.inputs
    return unbroadcast(F.mul(g, b), a.shape), unbroadcast(F.mul(g, a), b.shape)


@rule("div")
def _(n, g):
    a, b = n.inputs
    ga = F.div(g, b)
    return unbroadcast(ga, a.shape), unbroadcast(F.neg(F.mul(ga, n)), b.shape)


@rule("pow")
def _(n, g):
    a, b = n.inputs
    # an exponent of 0 has a zero gradient, also at a = 0 where b * a^(b-1) is 0 * inf (torch does the same)
    ga = F.where(F.eq(b, 0.0), 0.0, F.mul(g, F.mul(b, F.pow_(a, F.sub(b, 1.0)))))
    safe_log = F.log(F.where(F.gt(a, 0.0), a, 1.0))
    gb = F.mul(g, F.mul(n, safe_log))
    return unbroadcast(ga, a.shape), unbroadcast(gb, b.shape)


@rule("maximum", "minimum")
def _(n, g):
    a, b = n.inputs
    pick_a = F.ge(a, b) if n.op == "maximum" else F.le(a, b)
    # ties split evenly, like torch
    tie = F.eq(a, b)
    half = F.mul(g, 0.5)
    ga = F.where(tie, half, F.where(pick_a, g, 0.0))
    gb = F.where(tie, half, F.where(pick_a, 0.0, g))
    return unbroadcast(ga, a.shape), unbroadcast(gb, b.shape)


@rule("lt", "le", "gt", "ge", "eq", "ne")
def _(n, g):
    return None, None


@rule("isfinite")
def _(n, g):
    return (None,)


@rule("where")
def _(n, g):
    c, a, b = n.inputs
    return None, unbroadcast(F.where(c, g, 0.0), a.shape), unbroadcast(F.where(c, 0.0, g), b.shape)


@rule("neg")
def _(n, g):
    return (F.neg(g),)


@rule("exp")
def _(n, g):
    return (F.mul(g, n),)


@rule("log")
def _(n, g):
    return (F.div(g, n.inputs[0]),)


@rule("tanh")
def _(n, g):
    return (F.mul(g, F.sub(1.0, F.mul(n, n))),)


@rule("sigmoid")
def _(n, g):
    return (F.mul(g, F.mul(n, F.sub(1.0, n))),)


@rule("relu")
def _(n, g):
    return (F.where(F.gt(n.inputs[0], 0.0), g, 0.0),)


@rule("gelu")
def _(n, g):
    return (F.mul(g, make("gelu_grad", [n.inputs[0]])),)


@rule("erf")
def _(n, g):
    x = n.inputs[0]
    return (F.mul(g, F.mul(F.exp(F.neg(F.mul(x, x))), 2.0 / math.sqrt(math.pi))),)


@rule("sqrt")
def _(n, g):
    return (F.div(F.mul(g, 0.5), n),)


@rule("rsqrt")
def _(n, g):
    return (F.mul(g, F.mul(F.mul(n, F.mul(n, n)), -0.5)),)


@rule("reciprocal")
def _(n, g):
    return (F.neg(F.mul(g, F.mul(n, n))),)


@rule("abs")
def _(n, g):
    return (F.mul(g, F.sign(n.inputs[0])),)


@rule("sign", "gelu_grad")
def _(n, g):
    return (None,)


@rule("sin")
def _(n, g):
    return (F.mul(g, F.cos(n.inputs[0])),)


@rule("cos")
def _(n, g):
    return (F.neg(F.mul(g, F.sin(n.inputs[0]))),)


@rule("cast")
def _(n, g):
    x = n.inputs[0]
    return (F.cast(g, x.dtype) if dt.is_float(x.dtype) else None,)


@rule("reduce_sum")
def _(n, g):
    x = n.inputs[0]
    keep = tuple(1 if i in n.attrs["axes"] else s for i, s in enumerate(x.shape))
    return (F.expand(F.reshape(g, keep), x.shape),)


@rule("reduce_max")
def _(n, g):
    # gradient split evenly among tied maxima (torch.amax semantics)
    x = n.inputs[0]
    keep = tuple(1 if i in n.attrs["axes"] else s for i, s in enumerate(x.shape))
    m = F.reshape(n, keep)
    hit = F.cast(F.eq(x, m), x.dtype)
    cnt = F.reshape(F.sum_(hit, n.attrs["axes"], keepdims=True), keep)
    return (F.mul(hit, F.div(F.reshape(g, keep), cnt)),)


REMAT_MAX_NODES = 8        # a recomputed weight is at most this many nodes over stored leaves
REMAT_MAX_RANK = 64        # a product recomputed only through an inner dimension this small (LoRA's B A)


def rematerialized(x: Node) -> Node:
    """A fresh copy of `x` when it is a weight made cheaply from stored leaves (a decoded NF4 weight, a
    LoRA-merged W + s B A, their casts and transposes), else `x` itself. The backward reads the copy, so
    these weight-sized values are made again where the backward needs them instead of being held from the
    forward through the whole backward."""
    if x.realized or not x.inputs:
        return x
    memo: dict[int, Node] = {}
    count = [0]

    def cheap(n: Node) -> bool:
        if n.realized or n.op == "placeholder":
            return True
        count[0] += 1
        if count[0] > REMAT_MAX_NODES:
            return False
        if n.op == "matmul":
            if n.inputs[0].shape[-2 if n.attrs.get("trans_a") else -1] > REMAT_MAX_RANK:
                return False
        elif n.op not in ("nf4_dequant", "permute", "reshape", "cast", "add", "mul", "fill"):
            return False
        return all(cheap(i) for i in n.inputs)

    def copy(n: Node) -> Node:
        if n.realized or n.op == "placeholder" or not n.inputs:
            return n
        got = memo.get(n.id)
        if got is None:
            got = memo[n.id] = make(n.op, [copy(i) for i in n.inputs], **n.attrs)
        return got
    if x.op in ("permute", "reshape", "cast", "fill") or not cheap(x):
        inner = x.inputs[0] if x.op in ("permute", "reshape", "cast") else None
        if inner is None or not cheap(inner):
            return x
        return make(x.op, [copy(inner)], **x.attrs)
    return copy(x)


@rule("matmul")
def _matmul_rule(n, g):
    a, b = (rematerialized(i) for i in n.inputs)
    ta, tb = n.attrs.get("trans_a", False), n.attrs.get("trans_b", False)
    if ta or tb:
        # the operands as read (transposed views), their gradients transposed back (views again)
        ga, gb = _matmul_rule(make("matmul", [F.transpose(a) if ta else a, F.transpose(b) if tb else b]), g)
        return (F.transpose(ga) if ta else ga), (F.transpose(gb) if tb else gb)
    if len(b.shape) == 2 and len(a.shape) > 2:
        # a batch of rows times one matrix: the matrix's gradient is one [K, N] product over all rows,
        # not a [batch, K, N] stack summed afterwards
        k, m = a.shape[-1], b.shape[-1]
        a2, g2 = F.reshape(a, (-1, k)), F.reshape(g, (-1, m))
        ga, gb = _matmul_grads(a2, b, g2)
        return F.reshape(ga, a.shape), gb
    ga, gb = _matmul_grads(a, b, g)
    return unbroadcast(ga, a.shape), unbroadcast(gb, b.shape)


def _numel(x: Node) -> int:
    return math.prod(x.shape)


def _matmul_grads(a: Node, b: Node, g: Node) -> tuple[Node, Node]:
    """dA = g B^T and dB = A^T g, each written the way that copies less.

    When transposes fold into matmuls (F.transposes_fold, the default) an operand's transpose is free, so
    only a result's costs: dA is (B g^T)^T exactly when A is itself a transpose (the caller's permute rule
    transposes dA back, and the two cancel), dB likewise; every other transpose reads an operand and folds.
    Without folding: a transpose of an operand that is itself a transpose is free (it cancels), otherwise
    (B g^T)^T / (g^T A)^T transpose g and the result instead, which pays off when an operand is a big
    weight and g is a small batch's."""
    free = F.is_transpose
    if F.transposes_fold():
        # (batched: only where the operand has g's batch dims, so no unbroadcast sits between the transposes)
        same = lambda x: tuple(x.shape[:-2]) == tuple(g.shape[:-2])
        ga = F.transpose(F.matmul(b, F.transpose(g))) if free(a) and same(a) else F.matmul(g, F.transpose(b))
        gb = F.transpose(F.matmul(F.transpose(g), a)) if free(b) and same(b) else F.matmul(F.transpose(a), g)
        return ga, gb
    if len(a.shape) != 2 or len(b.shape) != 2:
        return F.matmul(g, F.transpose(b)), F.matmul(F.transpose(a), g)
    cost_a1 = 0 if free(b) else _numel(b)
    cost_a2 = _numel(g) + (0 if free(a) else _numel(a))
    ga = F.matmul(g, F.transpose(b)) if cost_a1 <= cost_a2 else F.transpose(F.matmul(b, F.transpose(g)))
    cost_b1 = 0 if free(a) else _numel(a)
    cost_b2 = _numel(g) + (0 if free(b) else _numel(b))
    gb = F.matmul(F.transpose(a), g) if cost_b1 <= cost_b2 else F.transpose(F.matmul(F.transpose(g), a))
    return ga, gb


@rule("reshape")
def _(n, g):
    return (F.reshape(g, n.inputs[0].shape),)


@rule("permute")
def _(n, g):
    perm = n.attrs["perm"]
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return (F.permute(g, inv),)


@rule("expand")
def _(n, g):
    return (unbroadcast(g, n.inputs[0].shape),)


@rule("slice")
def _(n, g):
    x = n.inputs[0]
    return (make("unslice", [g], shape=x.shape, starts=n.attrs["starts"], steps=n.attrs["steps"]),)


@rule("unslice")
def _(n, g):
    x = n.inputs[0]
    stops = tuple(a + (s - 1) * st + 1 if s else a for a, s, st in zip(n.attrs["starts"], x.shape, n.attrs["steps"]))
    return (F.slice_(g, n.attrs["starts"], stops, n.attrs["steps"]),)


@rule("sum_many")
def _(n, g):
    if n.attrs["square"]:
        return tuple(F.mul(F.mul(x, F.expand(g, x.shape)), 2.0) for x in n.inputs)
    return tuple(F.expand(g, x.shape) for x in n.inputs)


@rule("concat")
def _(n, g):
    ax = n.attrs["axis"]
    out, off = [], 0
    for x in n.inputs:
        starts = [0] * len(g.shape)
        stops = list(g.shape)
        starts[ax], stops[ax] = off, off + x.shape[ax]
        out.append(F.slice_(g, starts, stops, [1] * len(g.shape)))
        off += x.shape[ax]
    return tuple(out)


# A row lookup (index_select / embedding) from a table of at most ONEHOT_ROWS rows, with at most
# ONEHOT_ELEMS one-hot entries, gets its table gradient as onehot(ids)^T @ g, one matmul: on a GPU
# that is about 2 V N D flops at the matmul's rate, where the scatter-add scans every position for
# each of the V x D outputs (the GPT benchmark's 96-row embedding: 0.9 ms a step on the H200).
ONEHOT_ROWS = 4096
ONEHOT_ELEMS = 1 << 24


def _looked_up_rows(x: Node, axis: int, idx: Node) -> Node | None:
    """The [N, 1] row ids when gather(x, 0, idx) is a whole-row lookup of a 2-D table (idx an expand of a
    column of ids, as `F.index_select` builds it), else None."""
    if len(x.shape) != 2 or axis != 0 or idx.op != "expand" or not idx.inputs:
        return None
    ids = idx.inputs[0]
    if tuple(ids.shape) != (idx.shape[0], 1) or ids.dtype != "i32":
        return None
    return ids


@rule("gather")
def _(n, g):
    x, idx = n.inputs
    ids = _looked_up_rows(x, n.attrs["axis"], idx)
    rows, count = x.shape[0], idx.shape[0]
    if ids is not None and dt.is_float(g.dtype) and rows <= ONEHOT_ROWS and rows * count <= ONEHOT_ELEMS:
        onehot = F.cast(F.eq(ids, F.reshape(F.arange(rows), (1, rows))), g.dtype)
        return F.matmul(F.transpose(onehot), g), None
    return F.scatter_add(F.zeros(x.shape, g.dtype), n.attrs["axis"], idx, g), None


@rule("scatter_add")
def _(n, g):
    base, idx, src = n.inputs
    return g, None, F.gather(g, n.attrs["axis"], idx)


@rule("softmax")
def _(n, g):
    ax = n.attrs["axis"]
    gy = F.mul(g, n)
    return (F.sub(gy, F.mul(n, F.sum_(gy, ax, keepdims=True))),)


@rule("log_softmax")
def _(n, g):
    ax = n.attrs["axis"]
    return (F.sub(g, F.mul(F.exp(n), F.sum_(g, ax, keepdims=True))),)


def _norm_composite_bwd(op: str, x: Node, g: Node, w: Node | None, n_axes: int, eps: float) -> tuple:
    """(dx, g * xhat) of a layer_norm / rms_norm, as primitives: what the `*_norm_bwd` ops compute.
    With gh = g * w: dx = rstd * (gh - mean(gh) - xhat * mean(gh * xhat)) (layer_norm), dx = rstd * (gh -
    xhat * mean(gh * xhat)) (rms_norm); the statistics recomputed from x (the forward kernel keeps none)."""
    axes = tuple(range(len(x.shape) - int(n_axes), len(x.shape)))
    if op == "layer_norm":
        d = F.sub(x, F.mean(x, axes, keepdims=True))
    else:
        d = x
    r = F.rsqrt(F.add(F.mean(F.mul(d, d), axes, keepdims=True), eps))
    xh = F.mul(d, r)
    gh = F.mul(g, w) if w is not None else g
    inner = F.mul(xh, F.mean(F.mul(gh, xh), axes, keepdims=True))
    if op == "layer_norm":
        inner = F.add(inner, F.mean(gh, axes, keepdims=True))
    return F.mul(r, F.sub(gh, inner)), F.mul(g, xh)


@rule("layer_norm", "rms_norm")
def _(n, g):
    # one `layer_norm_bwd` / `rms_norm_bwd` node gives dx (and g * xhat with a weight); dw and db sum
    # g * xhat and g over the leading axes
    a = n.attrs
    x = n.inputs[0]
    w = n.inputs[1] if a.get("has_w") else None
    b = n.inputs[1 + bool(a.get("has_w"))] if a.get("has_b") else None
    bwd = make(n.op + "_bwd", [x, g] + ([w] if w is not None else []), n_axes=int(a["n_axes"]),
               eps=float(a["eps"]), has_w=w is not None)
    out = [F.item(bwd, 0) if w is not None else bwd]
    if w is not None:
        out.append(unbroadcast(F.item(bwd, 1), w.shape))
    if b is not None:
        out.append(unbroadcast(g, b.shape))
    return tuple(out)


@rule("layer_norm_bwd", "rms_norm_bwd")
def _(n, gs):
    """Second derivatives: the gradient of the composite the op stands for (a gradient penalty through a
    norm, say), built with `grad` on that composite."""
    a = n.attrs
    x, g = n.inputs[0], n.inputs[1]
    w = n.inputs[2] if a.get("has_w") else None
    dx, gxh = _norm_composite_bwd(n.op[:-4], x, g, w, a["n_axes"], a["eps"])
    if w is None:
        outs, gouts = [dx], [gs]
    else:
        outs, gouts = [], []
        for o, go in zip((dx, gxh), gs):
            if go is not None:
                outs.append(o)
                gouts.append(go)
    return tuple(grad(outs, list(n.inputs), gouts))


@rule("unfold")
def _(n, g):
    x = n.inputs[0]
    a = n.attrs
    return (make("fold", [g], size=x.shape[2:], kernel=a["kernel"], stride=a["stride"], padding=a["padding"],
                 dilation=a["dilation"]),)


@rule("fold")
def _(n, g):
    a = n.attrs
    return (make("unfold", [g], kernel=a["kernel"], stride=a["stride"], padding=a["padding"],
                 dilation=a["dilation"], pad_value=0.0),)


@rule("item")
def _(n, g):
    return (("item", n.attrs["index"], g),)


@rule("attention")
def _(n, gs):
    """gs: the list of output gradients (out, lse); the lse gradient is not propagated (it is internal)."""
    ins = list(n.inputs)
    g_out = gs[0]
    out, lse = F.item(n, 0), F.item(n, 1)
    extra = {a: n.attrs[a] for a in ("dropout", "key", "offset", "based") if a in n.attrs}
    bwd = make("attention_bwd", ins[:3] + [out, lse, g_out] + ins[3:], causal=n.attrs["causal"],
               scale=n.attrs["scale"], **extra)
    grads = [F.item(bwd, i) for i in range(3)]
    return tuple(grads) + (None,) * (len(ins) - 3)      # no gradient for the mask or the stream position


@rule("nf4_dequant")
def _(n, g):
    """A quantized base weight is frozen: asking for its gradient is a mistake, not a zero."""
    raise GraphError("nf4_dequant has no gradient: NF4-stored weights are frozen", where="op 'nf4_dequant'",
                     hint="train adapters (LoRA's A, B) beside it, or keep the weight in f32 to fine-tune it")


@rule("fill", "iota", "philox_uniform", "philox_bits", "const")
def _(n, g):
    return ()


def _bwd(s: str) -> str:
    """The scope of the gradient nodes of a node made in scope `s`."""
    return s if not s or s.endswith("/bwd") else s + "/bwd"


def _unslice_leaves(g: Node) -> list[Node] | None:
    """The unslice nodes a sum of gradient contributions adds up (g itself, or a tree of adds of them), or
    None when anything else is among its terms."""
    if g.op == "unslice" and not g.realized:
        return [g]
    if g.op == "add" and not g.realized and len(g.inputs) == 2 and tuple(g.inputs[0].shape) == tuple(g.shape) \
            and tuple(g.inputs[1].shape) == tuple(g.shape):
        a, b = _unslice_leaves(g.inputs[0]), _unslice_leaves(g.inputs[1])
        return a + b if a is not None and b is not None else None
    return None


def merge_unslices(g: Node) -> Node:
    """A gradient that is the sum of unslices of pieces which tile its shape along one axis (the slices of
    a split, e.g. q, k, v of one packed projection) as one concat of the pieces: a copy, where the sum
    would write a zero-padded full-size tensor per piece and add them."""
    parts = _unslice_leaves(g)
    if not parts or len(parts) < 2:
        return g
    shape = tuple(g.shape)
    axes = set()
    for u in parts:
        if tuple(u.attrs["shape"]) != shape or any(st != 1 for st in u.attrs["steps"]) or u.dtype != g.dtype:
            return g
        inner = tuple(u.inputs[0].shape)
        axes |= {i for i, (a, n, full) in enumerate(zip(u.attrs["starts"], inner, shape)) if a != 0 or n != full}
    if len(axes) != 1:
        return g
    (ax,) = axes
    parts = sorted(parts, key=lambda u: u.attrs["starts"][ax])
    at = 0
    for u in parts:
        if u.attrs["starts"][ax] != at:
            return g
        at += u.inputs[0].shape[ax]
    if at != shape[ax]:
        return g
    with scope(parts[0].scope):         # where the pieces' sum would have been made (a profile's layer)
        return F.concat([u.inputs[0] for u in parts], ax)


def grad(outputs: list[Node], wrt: list[Node], grad_outputs: list[Node] | None = None) -> list[Node | None]:
    """Gradients of sum(outputs * grad_outputs) with respect to each node of `wrt` (None if unreachable)."""
    if grad_outputs is None:
        for o in outputs:
            if o.numel != 1:
                raise GraphError(f"backward() needs a scalar or explicit gradients, got shape {tuple(o.shape)}",
                                 where=f"op '{o.op}'", hint="call .sum() first or pass the gradient")
        grad_outputs = [F.ones(o.shape, o.dtype) for o in outputs]
    order = toposort(outputs, cut_realized=False)
    want = {n.id for n in wrt}
    # only walk nodes on a path to some wrt node
    needs: set[int] = set()
    for n in order:
        if n.id in want or (any(i.id in needs for i in n.inputs) and not n.attrs.get("stop_gradient")):
            needs.add(n.id)
    grads: dict[int, Node] = {}
    multi: dict[int, dict[int, Node]] = {}
    for o, go in zip(outputs, grad_outputs):
        grads[o.id] = F.add(grads[o.id], go) if o.id in grads else go
    for n in reversed(order):
        if n.id not in needs or n.id in want and not n.inputs:
            continue
        if n.multi:
            parts = multi.get(n.id)
            if not parts:
                continue
            gs = [parts.get(i) for i in range(len(n.dtype))]
            if gs[0] is None:
                gs[0] = F.zeros(n.shape[0], n.dtype[0])
            with scope(_bwd(n.scope)):
                in_grads = VJP[n.op](n, gs)
        else:
            g = grads.get(n.id)
            if g is None or not n.inputs:
                continue
            g = merge_unslices(g)
            if n.op not in VJP:
                raise GraphError(f"op {n.op!r} has no gradient rule", where=f"op '{n.op}'")
            with scope(_bwd(n.scope)):
                in_grads = VJP[n.op](n, g)
        with scope(_bwd(n.scope)):          # the sums of gradient contributions too
            for inp, gi in zip(n.inputs, in_grads):
                if gi is None or inp.id not in needs:
                    continue
                if isinstance(gi, tuple) and gi and gi[0] == "item":
                    _, idx, gg = gi
                    d = multi.setdefault(inp.id, {})
                    d[idx] = F.add(d[idx], gg) if idx in d else gg
                    continue
                grads[inp.id] = F.add(grads[inp.id], gi) if inp.id in grads else gi
    return [merge_unslices(grads[w.id]) if w.id in grads else None for w in wrt]
