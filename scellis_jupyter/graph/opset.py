"""The primitive op set: each op's shape/dtype inference, in one registry.

Why: backends implement only these primitives; composites (layer_norm, conv2d, pooling, dropout, ...)
are built from them in graph/ops.py, so autodiff and every backend get them for free.
Errors name the op and the shapes involved.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .. import dtypes as dt
from ..errors import DTypeError, GraphError, ShapeError, did_you_mean
from .node import Node

UNARY = ("neg", "exp", "log", "tanh", "sigmoid", "relu", "gelu", "gelu_grad", "sqrt", "rsqrt", "abs",
         "sign", "sin", "cos", "reciprocal", "erf")
BINARY = ("add", "sub", "mul", "div", "pow", "maximum", "minimum")
COMPARE = ("lt", "le", "gt", "ge", "eq", "ne")
# bool tests of one float: `isfinite` reads the bits (inf and NaN have an all-ones exponent), since a shader
# compiler may assume no inf/NaN and fold a float test such as x - x == 0 to true (llvmpipe did)
PREDICATES = ("isfinite",)
ELEMENTWISE = UNARY + BINARY + COMPARE + PREDICATES + ("where", "cast")


@dataclass
class OpDef:
    name: str
    infer: Callable  # (inputs: list[Node], attrs: dict) -> (shape, dtype)


OPS: dict[str, OpDef] = {}


def register(name: str):
    def deco(fn):
        OPS[name] = OpDef(name, fn)
        return fn
    return deco


def _fmt(inputs) -> str:
    return ", ".join(f"{tuple(i.shape)}:{i.dtype}" for i in inputs)


def broadcast_shapes(op: str, *shapes) -> tuple:
    """NumPy broadcasting; raises ShapeError naming the op and the shapes."""
    nd = max((len(s) for s in shapes), default=0)
    out = []
    for ax in range(nd):
        dims = {s[len(s) - nd + ax] for s in shapes if len(s) - nd + ax >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise ShapeError(f"shapes {', '.join(str(tuple(s)) for s in shapes)} cannot be broadcast "
                             f"(axis {ax - nd}: sizes {sorted(dims)})", where=f"op '{op}'")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def norm_axis(op: str, axis: int, ndim: int, shape=None) -> int:
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        of = f" (shape {tuple(shape)})" if shape is not None else ""
        raise ShapeError(f"axis {axis} is out of range for a tensor of rank {ndim}{of}", where=f"op '{op}'")
    return axis % max(ndim, 1)


def make(op: str, inputs, **attrs) -> Node:
    """Build a node, running its shape and dtype inference (the only way nodes are made)."""
    if op not in OPS:
        raise GraphError(f"unknown op {op!r}", hint=did_you_mean(op, OPS))
    inputs = list(inputs)
    shape, dtype = OPS[op].infer(inputs, attrs)
    return Node(op, inputs, attrs, shape, dtype)


def _float_check(op, inputs):
    for i in inputs:
        if not dt.is_float(i.dtype):
            raise DTypeError(f"needs floating-point inputs, got {_fmt(inputs)}", where=f"op '{op}'",
                             hint="cast with .to('f32') first")


for _u in UNARY:
    def _inf_u(inputs, attrs, _u=_u):
        (x,) = inputs
        if _u not in ("neg", "abs", "sign"):
            _float_check(_u, inputs)
        return tuple(x.shape), x.dtype
    register(_u)(_inf_u)

for _p in PREDICATES:
    def _inf_p(inputs, attrs, _p=_p):
        (x,) = inputs
        _float_check(_p, inputs)
        return tuple(x.shape), "bool"
    register(_p)(_inf_p)

for _b in BINARY + COMPARE:
    def _inf_b(inputs, attrs, _b=_b):
        a, b = inputs
        shape = broadcast_shapes(_b, a.shape, b.shape)
        if a.dtype != b.dtype:
            raise DTypeError(f"dtypes differ: {_fmt(inputs)}", where=f"op '{_b}'",
                             hint="cast one side with .to(dtype)")
        return shape, ("bool" if _b in COMPARE else a.dtype)
    register(_b)(_inf_b)


@register("where")
def _inf_where(inputs, attrs):
    c, a, b = inputs
    if c.dtype != "bool":
        raise DTypeError(f"condition must be bool, got {_fmt(inputs[:1])}", where="op 'where'")
    if a.dtype != b.dtype:
        raise DTypeError(f"branches differ in dtype: {_fmt(inputs[1:])}", where="op 'where'")
    return broadcast_shapes("where", c.shape, a.shape, b.shape), a.dtype


@register("cast")
def _inf_cast(inputs, attrs):
    return tuple(inputs[0].shape), dt.canon(attrs["dtype"])


@register("const")
def _inf_const(inputs, attrs):  # leaves are made directly with storage; this is for completeness
    return tuple(attrs["shape"]), attrs["dtype"]


@register("fill")
def _inf_fill(inputs, attrs):
    shape = tuple(int(s) for s in attrs["shape"])
    if any(s < 0 for s in shape):
        raise ShapeError(f"negative size in shape {shape}", where="op 'fill'")
    return shape, dt.canon(attrs["dtype"])


@register("placeholder")
def _inf_placeholder(inputs, attrs):
    """A leaf whose data is bound at execution (training-step inputs, parameters, optimizer state):
    programs and plans are built before any tensor exists."""
    shape = tuple(int(s) for s in attrs["shape"])
    if any(s < 0 for s in shape):
        raise ShapeError(f"negative size in shape {shape}", where=f"placeholder {attrs.get('name', '')!r}")
    return shape, dt.canon(attrs["dtype"])


@register("iota")
def _inf_iota(inputs, attrs):
    return (int(attrs["n"]),), dt.canon(attrs.get("dtype", "i32"))


@register("philox_uniform")
def _inf_rand(inputs, attrs):
    return tuple(attrs["shape"]), "f32"


@register("philox_bits")
def _inf_bits(inputs, attrs):
    return tuple(attrs["shape"]), "u32"


def _red_axes(op, x, attrs):
    axes = attrs.get("axes")
    nd = len(x.shape)
    if axes is None:
        return tuple(range(nd))
    axes = {norm_axis(op, a, nd, x.shape) for a in axes}
    return tuple(sorted(axes)) if nd else ()  # a 0-d tensor's axis 0 / -1 is the tensor itself (torch)


for _r in ("reduce_sum", "reduce_max"):
    def _inf_red(inputs, attrs, _r=_r):
        (x,) = inputs
        axes = _red_axes(_r, x, attrs)
        attrs["axes"] = axes
        keep = attrs.get("keepdims", False)
        if _r == "reduce_max" and any(x.shape[a] == 0 for a in axes):
            raise ShapeError(f"max over an empty axis of shape {tuple(x.shape)}", where=f"op '{_r}'")
        shape = tuple((1 if i in axes else s) for i, s in enumerate(x.shape) if keep or i not in axes)
        return shape, x.dtype
    register(_r)(_inf_red)


MATMUL_FLAGS = ("trans_a", "trans_b")


@register("matmul")
def _inf_matmul(inputs, attrs):
    """a @ b over the last two axes, batch dims broadcast. trans_a / trans_b (default False): the operand
    is read with its last two axes swapped, exactly matmul(permute(x)) without the copy (a folded
    transpose, program/transpose_fold.py)."""
    a, b = inputs
    for f in MATMUL_FLAGS:
        if not isinstance(attrs.get(f, False), bool):
            raise GraphError(f"attr {f} must be True or False, got {attrs[f]!r}", where="op 'matmul'",
                             hint="trans_a / trans_b say whether an operand is read transposed")
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise ShapeError(f"needs rank >= 2 operands, got {_fmt(inputs)}", where="op 'matmul'")
    ta, tb = attrs.get("trans_a", False), attrs.get("trans_b", False)
    m, ka = (a.shape[-1], a.shape[-2]) if ta else (a.shape[-2], a.shape[-1])
    kb, n = (b.shape[-1], b.shape[-2]) if tb else (b.shape[-2], b.shape[-1])
    if ka != kb:
        ops = f"{tuple(a.shape)}{'^T' if ta else ''} @ {tuple(b.shape)}{'^T' if tb else ''}"
        raise ShapeError(f"inner dimensions differ: {ops} ({ka} != {kb})", where="op 'matmul'")
    if a.dtype != b.dtype:
        raise DTypeError(f"dtypes differ: {_fmt(inputs)}", where="op 'matmul'")
    _float_check("matmul", inputs)
    try:
        batch = broadcast_shapes("matmul", a.shape[:-2], b.shape[:-2])
    except ShapeError:
        raise ShapeError(f"batch dimensions of {tuple(a.shape)} @ {tuple(b.shape)} cannot be broadcast",
                         where="op 'matmul'") from None
    return batch + (m, n), a.dtype


@register("reshape")
def _inf_reshape(inputs, attrs):
    (x,) = inputs
    shape = list(attrs["shape"])
    n = x.numel
    if shape.count(-1) > 1:
        raise ShapeError(f"cannot reshape {tuple(x.shape)} to {tuple(shape)}: at most one -1 is allowed",
                         where="op 'reshape'")
    if -1 in shape:
        rest = 1
        for s in shape:
            if s != -1:
                rest *= s
        if rest == 0 or n % rest:
            raise ShapeError(f"cannot reshape {tuple(x.shape)} to {tuple(shape)}", where="op 'reshape'")
        shape[shape.index(-1)] = n // rest
    total = 1
    for s in shape:
        if s < 0:
            raise ShapeError(f"cannot reshape {tuple(x.shape)} to {tuple(shape)}: negative size",
                             where="op 'reshape'")
        total *= s
    if total != n:
        raise ShapeError(f"cannot reshape {tuple(x.shape)} ({n} elements) to {tuple(shape)} "
                         f"({total} elements)", where="op 'reshape'")
    attrs["shape"] = tuple(shape)
    return tuple(shape), x.dtype


@register("permute")
def _inf_permute(inputs, attrs):
    (x,) = inputs
    perm = tuple(norm_axis("permute", p, len(x.shape), x.shape) for p in attrs["perm"])
    if sorted(perm) != list(range(len(x.shape))):
        raise ShapeError(f"{attrs['perm']} is not a permutation of the axes of {tuple(x.shape)}",
                         where="op 'permute'")
    attrs["perm"] = perm
    return tuple(x.shape[p] for p in perm), x.dtype


@register("expand")
def _inf_expand(inputs, attrs):
    (x,) = inputs
    shape = tuple(attrs["shape"])
    if len(shape) < len(x.shape) or broadcast_shapes("expand", x.shape, shape) != shape:
        raise ShapeError(f"cannot expand {tuple(x.shape)} to {shape}", where="op 'expand'")
    return shape, x.dtype


@register("slice")
def _inf_slice(inputs, attrs):
    """attrs: starts, stops, steps (steps > 0), already normalized by the façade."""
    (x,) = inputs
    out = []
    for s, (a, b, st) in zip(x.shape, zip(attrs["starts"], attrs["stops"], attrs["steps"])):
        if st <= 0:
            raise ShapeError(f"slice step must be positive, got {st}", where="op 'slice'")
        out.append(max(0, (b - a + st - 1) // st))
    return tuple(out), x.dtype


@register("unslice")
def _inf_unslice(inputs, attrs):
    """The adjoint of slice: place x at strided positions of zeros of attrs['shape']."""
    return tuple(attrs["shape"]), inputs[0].dtype


@register("concat")
def _inf_concat(inputs, attrs):
    if not inputs:
        raise ShapeError("needs at least one tensor", where="op 'concat'")
    nd = len(inputs[0].shape)
    ax = norm_axis("concat", attrs["axis"], nd, inputs[0].shape)
    attrs["axis"] = ax
    for i in inputs:
        if len(i.shape) != nd or any(i.shape[k] != inputs[0].shape[k] for k in range(nd) if k != ax):
            raise ShapeError(f"shapes differ outside axis {ax}: {_fmt(inputs)}", where="op 'concat'")
        if i.dtype != inputs[0].dtype:
            raise DTypeError(f"dtypes differ: {_fmt(inputs)}", where="op 'concat'")
    shape = list(inputs[0].shape)
    shape[ax] = sum(i.shape[ax] for i in inputs)
    return tuple(shape), inputs[0].dtype


@register("sum_many")
def _inf_sum_many(inputs, attrs):
    """One scalar: the sum over every input of the sum of its elements (of their squares with
    attrs['square']), inputs taken in the order given. A gradient guard's or norm's many sums as one op,
    which a backend may run as one multi-tensor reduction."""
    if not inputs:
        raise ShapeError("needs at least one tensor", where="op 'sum_many'")
    attrs["square"] = bool(attrs.get("square", False))
    _float_check("sum_many", inputs)
    for i in inputs:
        if i.dtype != inputs[0].dtype:
            raise DTypeError(f"dtypes differ: {_fmt(inputs[:8])}", where="op 'sum_many'")
    return (), inputs[0].dtype


@register("gather")
def _inf_gather(inputs, attrs):
    """torch.gather semantics: out[i][j] = x[idx[i][j]][j] along attrs['axis']."""
    x, idx = inputs
    ax = norm_axis("gather", attrs["axis"], len(x.shape), x.shape)
    attrs["axis"] = ax
    if idx.dtype != "i32":
        raise DTypeError(f"index must be i32, got {idx.dtype}", where="op 'gather'")
    if len(idx.shape) != len(x.shape) or any(idx.shape[k] > x.shape[k] for k in range(len(x.shape)) if k != ax):
        raise ShapeError(f"index {tuple(idx.shape)} does not fit input {tuple(x.shape)} on axis {ax}",
                         where="op 'gather'")
    return tuple(idx.shape), x.dtype


@register("scatter_add")
def _inf_scatter_add(inputs, attrs):
    """torch.scatter_add semantics: out = base; out[idx[i][j]][j] += src[i][j] along attrs['axis']."""
    base, idx, src = inputs
    ax = norm_axis("scatter_add", attrs["axis"], len(base.shape), base.shape)
    attrs["axis"] = ax
    if idx.dtype != "i32":
        raise DTypeError(f"index must be i32, got {idx.dtype}", where="op 'scatter_add'")
    if tuple(idx.shape) != tuple(src.shape) or len(idx.shape) != len(base.shape):
        raise ShapeError(f"index {tuple(idx.shape)} and source {tuple(src.shape)} must match and have "
                         f"the rank of {tuple(base.shape)}", where="op 'scatter_add'")
    if base.dtype != src.dtype:
        raise DTypeError(f"dtypes differ: {_fmt([base, src])}", where="op 'scatter_add'")
    return tuple(base.shape), base.dtype


for _s in ("softmax", "log_softmax"):
    def _inf_sm(inputs, attrs, _s=_s):
        (x,) = inputs
        _float_check(_s, inputs)
        attrs["axis"] = norm_axis(_s, attrs.get("axis", -1), len(x.shape), x.shape)
        return tuple(x.shape), x.dtype
    register(_s)(_inf_sm)


def _norm_axes(op: str, x, attrs) -> int:
    """attrs['n_axes']: how many trailing dims of x are a row (a norm's and its backward's check)."""
    k = int(attrs["n_axes"])
    if not 1 <= k <= len(x.shape):
        raise ShapeError(f"n_axes={k} for a tensor of rank {len(x.shape)}", where=f"op '{op}'")
    return k


def _norm_affine(op: str, x, affine, k: int, what: str, inputs) -> None:
    """Each affine operand (`what`: its name in the message) has a row's shape and x's dtype."""
    for r in affine:
        if tuple(r.shape) != tuple(x.shape[len(x.shape) - k:]) or r.dtype != x.dtype:
            raise ShapeError(f"{what} must have the normalized shape and dtype: {_fmt(inputs)}", where=f"op '{op}'")


for _nm in ("layer_norm", "rms_norm"):
    def _inf_norm(inputs, attrs, _nm=_nm):
        """x [..., *normalized] (+ weight, + bias of the normalized shape): normalized over the trailing
        attrs['n_axes'] dims, one kernel a row on a GPU (the composite in functional.py is the meaning)."""
        x, rest = inputs[0], inputs[1:]
        _float_check(_nm, inputs)
        k = _norm_axes(_nm, x, attrs)
        want = 1 + bool(attrs.get("has_w")) + bool(attrs.get("has_b"))
        if len(inputs) != want or (_nm == "rms_norm" and attrs.get("has_b")):
            raise GraphError(f"{len(inputs)} inputs for flags has_w={attrs.get('has_w')}, "
                             f"has_b={attrs.get('has_b')}", where=f"op '{_nm}'")
        _norm_affine(_nm, x, rest, k, "weight/bias", inputs)
        return tuple(x.shape), x.dtype
    register(_nm)(_inf_norm)


def conv_out(size, k, s, p, d):
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


@register("unfold")
def _inf_unfold(inputs, attrs):
    """im2col with torch.nn.functional.unfold semantics: [N,C,H,W] -> [N, C*kh*kw, L]."""
    (x,) = inputs
    if len(x.shape) != 4:
        raise ShapeError(f"needs [N, C, H, W], got {tuple(x.shape)}", where="op 'unfold'")
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = (attrs[k] for k in ("kernel", "stride", "padding", "dilation"))
    oh, ow = conv_out(h, kh, sh, ph, dh), conv_out(w, kw, sw, pw, dw)
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"kernel {(kh, kw)} with padding {(ph, pw)} and dilation {(dh, dw)} does not fit "
                         f"input {(h, w)}", where="op 'unfold'")
    return (n, c * kh * kw, oh * ow), x.dtype


@register("fold")
def _inf_fold(inputs, attrs):
    """col2im (sum of overlapping patches): the adjoint of unfold; attrs['size'] = (H, W)."""
    (x,) = inputs
    (kh, kw) = attrs["kernel"]
    n, ckk, L = x.shape
    if ckk % (kh * kw):
        raise ShapeError(f"axis 1 ({ckk}) is not a multiple of kernel area {kh * kw}", where="op 'fold'")
    h, w = attrs["size"]
    return (n, ckk // (kh * kw), h, w), x.dtype


@register("attention")
def _inf_attention(inputs, attrs):
    """Flash attention forward: q [..., Lq, D], k/v [..., Lk, D(v)] -> (out [..., Lq, Dv], lse [..., Lq])."""
    q, k, v = inputs[:3]
    if len(q.shape) < 2 or q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1] or q.shape[-1] != k.shape[-1]:
        raise ShapeError(f"q, k, v must be [..., L, D] with matching batch dims, k and v the same length "
                         f"and q, k the same head size; got {_fmt(inputs[:3])}", where="op 'attention'")
    _float_check("attention", inputs[:3])
    if len(inputs) - int(bool(attrs.get("based"))) == 4:    # a step's stream position comes last
        m = inputs[3]
        if m.dtype != "bool":
            raise DTypeError(f"mask must be bool (True = attend), got {m.dtype}", where="op 'attention'")
        want = tuple(q.shape[:-1]) + (k.shape[-2],)
        if broadcast_shapes("attention", m.shape, want) != want:
            raise ShapeError(f"mask {tuple(m.shape)} does not broadcast to scores {want}", where="op 'attention'")
    out = tuple(q.shape[:-1]) + (v.shape[-1],)
    acc = "f32" if q.dtype == "f16" else q.dtype
    return (out, tuple(q.shape[:-1])), (q.dtype, acc)


for _nb in ("layer_norm_bwd", "rms_norm_bwd"):
    def _inf_norm_bwd(inputs, attrs, _nb=_nb):
        """x, g (the output's gradient, x's shape and dtype)[, weight] -> dx, or (dx, g * xhat) with a weight
        (g * xhat summed over the leading dims is the weight's gradient). One row kernel on a GPU in place of
        the composite backward's dozen dispatches; the composite (autodiff._norm_composite_bwd) is the meaning."""
        x, g, rest = inputs[0], inputs[1], inputs[2:]
        _float_check(_nb, inputs)
        k = _norm_axes(_nb, x, attrs)
        if tuple(g.shape) != tuple(x.shape) or g.dtype != x.dtype:
            raise ShapeError(f"the gradient must have x's shape and dtype: {_fmt(inputs)}", where=f"op '{_nb}'")
        if len(rest) != int(bool(attrs.get("has_w"))):
            raise GraphError(f"{len(inputs)} inputs for has_w={attrs.get('has_w')}", where=f"op '{_nb}'")
        _norm_affine(_nb, x, rest, k, "the weight", inputs)
        if rest:
            return (tuple(x.shape), tuple(x.shape)), (x.dtype, x.dtype)
        return tuple(x.shape), x.dtype
    register(_nb)(_inf_norm_bwd)


@register("attention_bwd")
def _inf_attention_bwd(inputs, attrs):
    """inputs q, k, v, out, lse, dout[, mask] -> (dq, dk, dv)."""
    q, k, v = inputs[:3]
    return (tuple(q.shape), tuple(k.shape), tuple(v.shape)), (q.dtype, k.dtype, v.dtype)


@register("item")
def _inf_item(inputs, attrs):
    """Project output number attrs['index'] of a multi-output node (a view, no copy)."""
    (x,) = inputs
    i = attrs["index"]
    return tuple(x.shape[i]), x.dtype[i]


# ---- NF4 (QLoRA) -------------------------------------------------------------------------------------
# The 16 NormalFloat-4 levels of Dettmers et al. 2023 (QLoRA, appendix E): quantiles of N(0, 1) scaled to
# [-1, 1], with an exact zero. One table for the op, both kernels and the host-side encoder.
NF4_TABLE = (
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
)


@register("nf4_dequant")
def _inf_nf4(inputs, attrs):
    """codes i8 [ceil(n/2)] (element e in byte e//2, low nibble first), absmax f32 [ceil(n/block)] -> f32 shape."""
    codes, absmax = inputs
    shape, block = tuple(attrs["shape"]), int(attrs["block"])
    n = 1
    for s in shape:
        n *= s
    if block < 1:
        raise ShapeError(f"block must be at least 1, got {block}", where="op 'nf4_dequant'")
    if codes.dtype != "i8" or absmax.dtype != "f32":
        raise DTypeError(f"needs codes i8 and absmax f32, got {_fmt(inputs)}", where="op 'nf4_dequant'",
                         hint="encode weights with scellis_jupyter.graph.quantize.quantize(w, 'nf4')")
    if tuple(codes.shape) != ((n + 1) // 2,) or tuple(absmax.shape) != (-(-n // block),):
        raise ShapeError(f"for shape {shape} and block {block} expected codes ({(n + 1) // 2},) and absmax "
                         f"({-(-n // block)},), got {_fmt(inputs)}", where="op 'nf4_dequant'")
    return shape, "f32"
