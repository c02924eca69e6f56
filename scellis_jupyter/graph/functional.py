"""Graph-level functions: primitives wrapped, plus composites built only from primitives.

Why composites: layer_norm, conv2d, pooling, dropout and friends get autodiff and every backend for
free; fusion (program/) removes the extra dispatches they would otherwise cost.
These take and return Nodes; the eager façade (tensor.py) and sc.ops wrap them for users.
"""
from __future__ import annotations

import math
from typing import Sequence

from .. import dtypes as dt, settings
from ..errors import ShapeError
from ..rng.generator import Stream
from .node import Node
from .opset import make, norm_axis
from .opset import conv_out


def scalar(v, dtype: str = "f32") -> Node:
    return make("fill", [], shape=(), value=float(v) if dt.is_float(dtype) else int(v), dtype=dtype)


def full(shape, value, dtype: str = "f32") -> Node:
    return make("fill", [], shape=tuple(shape), value=value, dtype=dt.canon(dtype))


def zeros(shape, dtype: str = "f32") -> Node:
    return full(shape, 0.0 if dt.is_float(dt.canon(dtype)) else 0, dtype)


def ones(shape, dtype: str = "f32") -> Node:
    return full(shape, 1.0 if dt.is_float(dt.canon(dtype)) else 1, dtype)


def placeholder(shape, dtype: str = "f32", name: str = "") -> Node:
    """A leaf bound at execution time (see opset 'placeholder')."""
    return make("placeholder", [], shape=tuple(int(x) for x in shape), dtype=dt.canon(dtype), name=name)


def arange(n: int, dtype: str = "i32") -> Node:
    return make("iota", [], n=int(n), dtype=dt.canon(dtype))


def _pair(a, b):
    """Turn python scalars into 0-d fills of the other side's dtype."""
    if not isinstance(a, Node):
        a = scalar(a, b.dtype if isinstance(b, Node) else "f32")
    if not isinstance(b, Node):
        b = scalar(b, a.dtype)
    return a, b


def _binary(op):
    def f(a, b) -> Node:
        a, b = _pair(a, b)
        return make(op, [a, b])
    f.__name__ = op
    return f


add, sub, mul, div, pow_, maximum, minimum = (_binary(o) for o in
                                              ("add", "sub", "mul", "div", "pow", "maximum", "minimum"))
lt, le, gt, ge, eq, ne = (_binary(o) for o in ("lt", "le", "gt", "ge", "eq", "ne"))


def isfinite(x: Node) -> Node:
    """Bool: x is neither inf nor NaN (a test of its bits on every backend)."""
    return make("isfinite", [x])


def _unary(op):
    def f(x: Node) -> Node:
        return make(op, [x])
    f.__name__ = op
    return f


(neg, exp, log, tanh, sigmoid, relu, gelu_exact, sqrt, rsqrt, abs_, sign, sin, cos, reciprocal, erf) = (
    _unary(o) for o in ("neg", "exp", "log", "tanh", "sigmoid", "relu", "gelu", "sqrt", "rsqrt", "abs",
                        "sign", "sin", "cos", "reciprocal", "erf"))


def gelu(x: Node, approximate: str = "none") -> Node:
    """GELU; exact (erf) by default like torch, or the tanh approximation."""
    if approximate == "tanh":
        c = math.sqrt(2.0 / math.pi)
        inner = mul(add(x, mul(pow_(x, 3.0), 0.044715)), c)
        return mul(mul(x, 0.5), add(tanh(inner), 1.0))
    return gelu_exact(x)


def silu(x: Node) -> Node:
    return mul(x, sigmoid(x))


def where(cond: Node, a, b) -> Node:
    if not isinstance(a, Node) and not isinstance(b, Node):
        a = scalar(a)
    a, b = _pair(a, b)
    return make("where", [cond, a, b])


def clamp(x: Node, lo=None, hi=None) -> Node:
    """torch.clamp: the gradient passes where lo <= x <= hi (bounds included), NaN propagates."""
    if lo is not None:
        x = where(lt(x, lo), lo, x)
    if hi is not None:
        x = where(gt(x, hi), hi, x)
    return x


def cast(x: Node, dtype) -> Node:
    dtype = dt.canon(dtype)
    return x if x.dtype == dtype else make("cast", [x], dtype=dtype)


def _axes(axis, nd):
    if axis is None:
        return None
    return (axis,) if isinstance(axis, int) else tuple(axis)


def sum_(x: Node, axis=None, keepdims: bool = False) -> Node:
    return make("reduce_sum", [x], axes=_axes(axis, len(x.shape)), keepdims=keepdims)


def sum_many(xs: Sequence[Node], square: bool = False) -> Node:
    """sum(xs[0]) + sum(xs[1]) + ... (of squares with `square`), one scalar, as one op."""
    return make("sum_many", list(xs), square=square)


def max_(x: Node, axis=None, keepdims: bool = False) -> Node:
    return make("reduce_max", [x], axes=_axes(axis, len(x.shape)), keepdims=keepdims)


def _count(x: Node, axis) -> int:
    nd = len(x.shape)
    axes = range(nd) if axis is None else {norm_axis("mean", a, nd, x.shape) for a in _axes(axis, 0)}
    n = 1
    for a in axes:
        n *= x.shape[a] if x.shape else 1
    return n


def mean(x: Node, axis=None, keepdims: bool = False) -> Node:
    n = _count(x, axis)
    return div(sum_(x, axis, keepdims), float(n) if n else float("nan"))


def var(x: Node, axis=None, keepdims: bool = False, correction: int = 1) -> Node:
    """Variance with Bessel's correction by default (torch.var's default)."""
    n = _count(x, axis)
    m = mean(x, axis, keepdims=True)
    d = sub(x, m)
    denom = n - correction
    return div(sum_(mul(d, d), axis, keepdims), float(denom) if denom > 0 else float("nan"))


def matmul(a: Node, b: Node) -> Node:
    """numpy.matmul semantics, 1-D operands included."""
    if (len(a.shape) == 1 or len(b.shape) == 1) and a.shape and b.shape \
            and a.shape[-1] != b.shape[0 if len(b.shape) == 1 else -2]:
        raise ShapeError(f"inner dimensions differ: {tuple(a.shape)} @ {tuple(b.shape)}", where="op 'matmul'")
    if len(a.shape) == 1 and len(b.shape) == 1:
        return reshape(make("matmul", [reshape(a, (1, -1)), reshape(b, (-1, 1))]), ())
    if len(a.shape) == 1:
        out = make("matmul", [reshape(a, (1, -1)), b])
        return reshape(out, out.shape[:-2] + (out.shape[-1],))
    if len(b.shape) == 1:
        out = make("matmul", [a, reshape(b, (-1, 1))])
        return reshape(out, out.shape[:-1])
    return make("matmul", [a, b])


def reshape(x: Node, shape) -> Node:
    shape = tuple(shape)
    if tuple(x.shape) == shape:
        return x
    return make("reshape", [x], shape=shape)


def stop_gradient(x: Node) -> Node:
    """x itself in the forward; autodiff passes nothing through it (torch's .detach()).

    An identity view marked `stop_gradient`, so every backend already runs it; graph.autodiff cuts there.
    """
    return make("reshape", [x], shape=tuple(x.shape), stop_gradient=True)


def permute(x: Node, perm) -> Node:
    """x with its axes reordered; a permute of a (not yet computed) permute is one permute, or none when
    they cancel (a gradient's transpose of a transposed weight is the weight itself, not a copy)."""
    perm = tuple(perm)
    if perm == tuple(range(len(x.shape))):
        return x
    if x.op == "permute" and not x.realized and x.inputs:
        inner = x.attrs["perm"]
        return permute(x.inputs[0], tuple(inner[p] for p in perm))
    return make("permute", [x], perm=perm)


def is_transpose(x: Node) -> bool:
    """x is a (not yet computed) swap of its last two axes: a transposed view that folds away."""
    nd = len(x.shape)
    return (x.op == "permute" and not x.realized and nd >= 2
            and tuple(x.attrs["perm"]) == tuple(range(nd - 2)) + (nd - 1, nd - 2))


def transposes_fold() -> bool:
    """Whether compiled programs fold a swap of the last two axes into the matmul that reads it
    (program/transpose_fold.py): on unless SCELLIS_FOLD_TRANSPOSE or SCELLIS_FUSION is off. Graph
    builders read it to pick forms: with folding, an operand's transpose costs nothing, a result's does."""
    return settings.flag("SCELLIS_FOLD_TRANSPOSE") and settings.flag("SCELLIS_FUSION")


def transpose(x: Node, a: int = -2, b: int = -1) -> Node:
    nd = len(x.shape)
    if nd < 2:
        return x
    perm = list(range(nd))
    a, b = norm_axis("transpose", a, nd, x.shape), norm_axis("transpose", b, nd, x.shape)
    perm[a], perm[b] = perm[b], perm[a]
    return permute(x, perm)


def expand(x: Node, shape) -> Node:
    shape = tuple(shape)
    if tuple(x.shape) == shape:
        return x
    return make("expand", [x], shape=shape)


def broadcast_to(x: Node, shape) -> Node:
    """torch.broadcast_to / Tensor.expand: new leading axes allowed; -1 keeps an existing size."""
    lead = len(shape) - len(x.shape)
    shape = tuple(x.shape[i - lead] if s == -1 and i >= lead else s for i, s in enumerate(shape))
    if len(x.shape) < len(shape):
        x = reshape(x, (1,) * (len(shape) - len(x.shape)) + tuple(x.shape))
    return expand(x, shape)


def slice_(x: Node, starts, stops, steps) -> Node:
    return make("slice", [x], starts=tuple(starts), stops=tuple(stops), steps=tuple(steps))


def getitem(x: Node, key) -> Node:
    """Basic indexing: ints, slices (positive steps), None and Ellipsis; integer tensors via gather."""
    if not isinstance(key, tuple):
        key = (key,)
    if any(isinstance(k, Node) for k in key):
        if len(key) == 1 and isinstance(key[0], Node):
            if not x.shape:
                raise ShapeError("a 0-d tensor cannot be indexed with a tensor", where="op 'getitem'")
            idx = cast(key[0], "i32")
            return index_select(x, 0, where(lt(idx, 0), add(idx, x.shape[0]), idx))  # negatives count from the end
        raise ShapeError("tensor indices are supported only as x[idx] on the first axis",
                         where="op 'getitem'", hint="use sc.ops.gather for other axes")
    n_real = sum(1 for k in key if k is not None and k is not Ellipsis)
    if n_real > len(x.shape):
        raise ShapeError(f"too many indices ({n_real}) for a tensor of shape {tuple(x.shape)}", where="op 'getitem'")
    if Ellipsis in key:
        i = key.index(Ellipsis)
        key = key[:i] + (slice(None),) * (len(x.shape) - n_real) + key[i + 1:]
    else:
        key = key + (slice(None),) * (len(x.shape) - n_real)
    starts, stops, steps, out_shape = [], [], [], []
    ax = 0
    for k in key:
        if k is None:
            out_shape.append(1)
            continue
        size = x.shape[ax]
        if isinstance(k, slice):
            a, b, s = k.indices(size)
            if s <= 0:
                raise ShapeError("negative or zero slice steps are not supported", where="op 'getitem'",
                                 hint="use sc.ops.flip (not yet) or index with a tensor")
            starts.append(a); stops.append(max(a, b)); steps.append(s)
            out_shape.append(max(0, (max(a, b) - a + s - 1) // s))
        else:
            k = int(k)
            if not -size <= k < size:
                raise ShapeError(f"index {k} is out of range for axis {ax} of size {size}", where="op 'getitem'")
            k %= size
            starts.append(k); stops.append(k + 1); steps.append(1)
        ax += 1
    y = x
    if (tuple(starts), tuple(stops), tuple(steps)) != (tuple([0] * len(x.shape)), tuple(x.shape), tuple([1] * len(x.shape))):
        y = slice_(x, starts, stops, steps)
    return reshape(y, tuple(out_shape))


def concat(xs: Sequence[Node], axis: int = 0) -> Node:
    xs = list(xs)
    return xs[0] if len(xs) == 1 else make("concat", xs, axis=axis)


def stack(xs: Sequence[Node], axis: int = 0) -> Node:
    xs = list(xs)
    nd = len(xs[0].shape) + 1
    axis = norm_axis("stack", axis, nd)
    return concat([reshape(x, x.shape[:axis] + (1,) + x.shape[axis:]) for x in xs], axis)


def gather(x: Node, axis: int, idx: Node) -> Node:
    return make("gather", [x, cast(idx, "i32")], axis=axis)


def scatter_add(base: Node, axis: int, idx: Node, src: Node) -> Node:
    return make("scatter_add", [base, cast(idx, "i32"), src], axis=axis)


def index_select(x: Node, axis: int, idx: Node) -> Node:
    """x.index_select(axis, idx) for a 1-D index, as a gather with the index broadcast."""
    axis = norm_axis("index_select", axis, len(x.shape), x.shape)
    if len(idx.shape) != 1:
        flat = index_select(x, axis, reshape(idx, (-1,)))
        return reshape(flat, x.shape[:axis] + tuple(idx.shape) + x.shape[axis + 1:])
    shape = list(x.shape)
    shape[axis] = idx.shape[0]
    view = [1] * len(x.shape)
    view[axis] = idx.shape[0]
    return gather(x, axis, expand(reshape(cast(idx, "i32"), view), shape))


def embedding(table: Node, idx: Node) -> Node:
    return index_select(table, 0, idx)


def softmax(x: Node, axis: int = -1) -> Node:
    return make("softmax", [x], axis=axis)


def log_softmax(x: Node, axis: int = -1) -> Node:
    return make("log_softmax", [x], axis=axis)


def _norm_primitive(x: Node, shape: tuple, *affine) -> bool:
    """Whether a norm is one `layer_norm` / `rms_norm` node (a kernel a row on a GPU): a non-empty float
    input whose weight and bias, when given, have exactly the normalized shape and x's dtype. Anything
    else (broadcast weights, empty rows) is built from the composite below, which defines the meaning."""
    if not dt.is_float(x.dtype) or not shape or any(s == 0 for s in x.shape):
        return False
    return all(t is None or (tuple(t.shape) == tuple(shape) and t.dtype == x.dtype) for t in affine)


def layer_norm(x: Node, shape, weight: Node | None = None, bias: Node | None = None, eps: float = 1e-5) -> Node:
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if tuple(x.shape[len(x.shape) - len(shape):]) != shape:
        raise ShapeError(f"normalized shape {shape} is not the trailing shape of {tuple(x.shape)}",
                         where="op 'layer_norm'")
    axes = tuple(range(len(x.shape) - len(shape), len(x.shape)))
    if _norm_primitive(x, shape, weight, bias):
        ins = [x] + [t for t in (weight, bias) if t is not None]
        return make("layer_norm", ins, n_axes=len(shape), eps=float(eps), has_w=weight is not None,
                    has_b=bias is not None)
    m = mean(x, axes, keepdims=True)
    d = sub(x, m)
    v = mean(mul(d, d), axes, keepdims=True)
    y = mul(d, rsqrt(add(v, eps)))
    if weight is not None:
        y = mul(y, weight)
    if bias is not None:
        y = add(y, bias)
    return y


def rms_norm(x: Node, shape, weight: Node | None = None, eps: float | None = None) -> Node:
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if tuple(x.shape[len(x.shape) - len(shape):]) != shape:
        raise ShapeError(f"normalized shape {shape} is not the trailing shape of {tuple(x.shape)}",
                         where="op 'rms_norm'")
    axes = tuple(range(len(x.shape) - len(shape), len(x.shape)))
    eps = float(eps) if eps is not None else float(__import__("numpy").finfo(dt.to_numpy(x.dtype)).eps)
    if _norm_primitive(x, shape, weight, None):
        ins = [x] + ([weight] if weight is not None else [])
        return make("rms_norm", ins, n_axes=len(shape), eps=eps, has_w=weight is not None, has_b=False)
    y = mul(x, rsqrt(add(mean(mul(x, x), axes, keepdims=True), eps)))
    return mul(y, weight) if weight is not None else y


def _2(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def unfold(x: Node, kernel, stride=1, padding=0, dilation=1, pad_value: float = 0.0) -> Node:
    return make("unfold", [x], kernel=_2(kernel), stride=_2(stride), padding=_2(padding),
                dilation=_2(dilation), pad_value=float(pad_value))


def conv2d(x: Node, w: Node, b: Node | None = None, stride=1, padding=0, dilation=1, groups: int = 1) -> Node:
    """2-D convolution (cross-correlation, like torch) as unfold + batched matmul."""
    if len(x.shape) != 4 or len(w.shape) != 4:
        raise ShapeError(f"needs input [N,C,H,W] and weight [O,C/groups,kh,kw], got {tuple(x.shape)} and "
                         f"{tuple(w.shape)}", where="op 'conv2d'")
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    if c != cg * groups or o % groups:
        raise ShapeError(f"input {tuple(x.shape)} and weight {tuple(w.shape)} with groups={groups}: input channels "
                         f"{c} != weight channels {cg} x groups (or out channels {o} not divisible by groups)",
                         where="op 'conv2d'")
    cols = unfold(x, (kh, kw), stride, padding, dilation)               # [N, C*kh*kw, L]
    L = cols.shape[-1]
    oh = conv_out(h, kh, _2(stride)[0], _2(padding)[0], _2(dilation)[0])
    ow = L // oh
    cols = reshape(cols, (n, groups, cg * kh * kw, L))
    wm = reshape(w, (1, groups, o // groups, cg * kh * kw))
    y = reshape(matmul(wm, cols), (n, o, oh, ow))                          # [N, G, O/G, L]
    if b is not None:
        y = add(y, reshape(b, (1, o, 1, 1)))
    return y


def _pool_cols(x, kernel, stride, padding, pad_value):
    n, c, h, w = x.shape
    k = _2(kernel)
    s = _2(stride if stride is not None else kernel)
    cols = unfold(reshape(x, (n * c, 1, h, w)), k, s, padding, 1, pad_value)  # [N*C, kh*kw, L]
    oh = conv_out(h, k[0], s[0], _2(padding)[0], 1)
    ow = cols.shape[-1] // oh
    return cols, (n, c, oh, ow)


def max_pool2d(x: Node, kernel, stride=None, padding=0) -> Node:
    cols, shp = _pool_cols(x, kernel, stride, padding, float("-inf"))
    return reshape(max_(cols, 1), shp)


def avg_pool2d(x: Node, kernel, stride=None, padding=0) -> Node:
    """Average pool counting padded zeros (torch's count_include_pad=True default)."""
    cols, shp = _pool_cols(x, kernel, stride, padding, 0.0)
    return reshape(mean(cols, 1), shp)


def linear(x: Node, w: Node, b: Node | None = None) -> Node:
    """y = x W^T + b, with W [out, in] as in torch.

    When the weight outweighs the activations (a wide layer on a small batch), y = (W x^T)^T instead:
    the copies transposed are the activations', not the weight's (and autodiff then gives dW = dy^T x
    directly, with no weight-sized transpose either). When transposes fold into matmuls (the default) no
    copy is made either way, and x W^T is kept."""
    rows = math.prod(x.shape[:-1]) if len(x.shape) > 1 else 1
    out_f, in_f = w.shape[-2], w.shape[-1]
    if len(w.shape) == 2 and len(x.shape) >= 2 and out_f * in_f > rows * (in_f + out_f) and not transposes_fold():
        x2 = reshape(x, (rows, in_f))
        y = reshape(transpose(matmul(w, transpose(x2))), tuple(x.shape[:-1]) + (out_f,))
    else:
        y = matmul(x, transpose(w))
    return add(y, b) if b is not None else y


def attention(q: Node, k: Node, v: Node, causal: bool = False, mask: Node | None = None,
              scale: float | None = None, dropout: float = 0.0, gen: Stream | None = None) -> Node:
    """Memory-efficient attention: softmax(q k^T * scale [+ mask]) v, never forming the score matrix.

    dropout > 0 (training) drops probabilities with that chance and scales the rest by 1 / (1 - p), as
    torch's scaled_dot_product_attention(dropout_p=p): pair (row i, key j) of flattened head h keeps
    when the uniform of word (h * Lq + i) * Lk + j of the taken block of `gen`'s stream is >= p, so the
    backward (and every backend) regenerates the same mask without storing it."""
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    ins = [q, k, v] + ([mask] if mask is not None else [])
    attrs = dict(causal=bool(causal), scale=scale)
    if dropout:
        if not 0.0 <= dropout < 1.0:
            raise ShapeError(f"dropout probability must be in [0, 1), got {dropout}", where="op 'attention'")
        if gen is None:
            raise ShapeError("attention dropout needs a random stream (gen=)", where="op 'attention'",
                             hint="pass the layer's generator stream, e.g. ctx.gen(name)")
        n = math.prod(q.shape[:-1]) * k.shape[-2]
        attrs.update(dropout=float(dropout), key=tuple(gen.key), offset=gen.take(n), based=gen.base is not None)
        if gen.base is not None:
            ins.append(gen.base)
    node = make("attention", ins, **attrs)
    return item(node, 0)


def item(node: Node, index: int) -> Node:
    return make("item", [node], index=index)


def uniform_node(stream: Stream, shape) -> Node:
    """Uniforms in [0, 1) of `shape`, the next words of `stream` (bit-identical to `stream.uniform`)."""
    n = math.prod(shape)
    ins = [stream.base] if stream.base is not None else []
    return make("philox_uniform", ins, shape=tuple(shape), key=stream.key, offset=stream.take(n))


def bits_node(stream: Stream, shape) -> Node:
    """Raw u32 Philox words of `shape`, the next words of `stream` (bit-identical to `stream.bits`)."""
    n = math.prod(shape)
    ins = [stream.base] if stream.base is not None else []
    return make("philox_bits", ins, shape=tuple(shape), key=stream.key, offset=stream.take(n))


def dropout(x: Node, p: float, gen, training: bool = True) -> Node:
    """Inverted dropout; the mask draws from `gen`'s stream at logical element positions."""
    if not training or p == 0.0:
        return x
    if not 0.0 <= p < 1.0:
        raise ShapeError(f"dropout probability must be in [0, 1), got {p}", where="op 'dropout'")
    u = uniform_node(gen, x.shape)
    keep = ge(u, scalar(p, "f32"))
    return where(keep, mul(x, 1.0 / (1.0 - p)), scalar(0.0, x.dtype))


def nf4_dequant(codes: Node, absmax: Node, shape, block: int = 64) -> Node:
    """f32 weight of `shape` from NF4 codes (i8, two 4-bit codes per byte) and per-block absmax (QLoRA).

    No gradient: the stored weight is frozen; adapters train beside it.
    """
    return make("nf4_dequant", [codes, absmax], shape=tuple(int(s) for s in shape), block=int(block))
