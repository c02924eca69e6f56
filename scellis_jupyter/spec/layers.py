"""The layers a spec's `op` names: declared attrs, parameters, shape inference and a forward pass.

Why declarations: the checker validates a node's attrs, the planner counts parameters and the engine
initializes them from the same `Layer` entry, before any compute. Forward passes are built only from
`graph.functional`, so every layer gets autodiff, fusion and both backends for free.
Shapes given to `infer` and `params` exclude the batch axis; `forward` works on batch-first nodes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from .. import dtypes as dt
from ..graph.params import ParamDecl
from ..errors import DTypeError, GraphError, ShapeError, did_you_mean
from ..graph import functional as F
from ..graph.node import Node, current_scope, scope
from ..graph.opset import conv_out
from .schema import KNOWN, MAX_SIZE, Checker, format_path, kind_of, show

REQUIRED = object()


@dataclass(frozen=True)
class Attr:
    """One attr of a layer. type: int | float | bool | str | pair (int or [int, int]) | shape (ints, one -1)."""

    type: str
    default: Any = REQUIRED
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    choices: tuple[str, ...] | None = None
    catalog: str | None = None      # name of a KNOWN table the value must be in


@dataclass
class LayerCtx:
    """What a forward pass may ask of the run: training or not, and random streams for dropout."""

    training: bool = False
    node: str = ""
    gen_factory: Callable[[str], Any] | None = None

    def gen(self, name: str = ""):
        """The dropout sub-stream of this node (`dropout/<node>[.<name>]`), so masks differ per layer."""
        if self.gen_factory is None:
            raise GraphError(f"node {self.node!r} needs random numbers for dropout in training",
                             hint="pass gen_factory=sc.rng.Generator(seed).stream to forward")
        stream = "dropout/" + self.node + (f".{name}" if name else "")
        return self.gen_factory(stream)


@dataclass(frozen=True)
class Layer:
    name: str
    attrs: dict[str, Attr]
    infer: Callable[[list, list, dict], tuple]
    forward: Callable[[list, dict, dict, LayerCtx], Node]
    params: Callable[[list, dict], list] = field(default=lambda shapes, attrs: [])
    arity: tuple[int, int | None] = (1, 1)
    doc: str = ""


LAYERS: dict[str, Layer] = {}


def register(layer: Layer) -> Layer:
    LAYERS[layer.name] = layer
    return layer


# ---- shared helpers -------------------------------------------------------------------------------------
def _float_in(op: str, dtypes: list) -> None:
    for d in dtypes:
        if not dt.is_float(d):
            hint = "integer tokens go through an 'embedding' node first" if d in ("i32", "i8", "u32") else ""
            raise DTypeError(f"{op} needs floating-point input, got {d}", hint=hint)


def _rank(op: str, shape: tuple, lo: int, hi: int | None = None, what: str = "") -> None:
    if len(shape) < lo or (hi is not None and len(shape) > hi):
        want = f"rank {lo}" if hi == lo else f"rank >= {lo}" if hi is None else f"rank {lo}..{hi}"
        raise ShapeError(f"{op} needs per-example input of {want}{what}, got shape {tuple(shape)}")


def _pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


def _axis(op: str, axis: int, rank: int) -> int:
    """A per-example axis (batch excluded) normalized to 0..rank-1."""
    if not -rank <= axis < rank:
        raise ShapeError(f"{op} axis {axis} is out of range for per-example rank {rank}")
    return axis % rank


def _same_float(op, shapes, dtypes):
    _float_in(op, dtypes)
    return tuple(shapes[0]), dtypes[0]


def _linear_params(prefix: str, n_in: int, n_out: int, init: str, bias: bool) -> list[ParamDecl]:
    ps = [ParamDecl(f"{prefix}weight", (n_out, n_in), init, n_in, n_out, "weight")]
    if bias:
        ps.append(ParamDecl(f"{prefix}bias", (n_out,), "zeros", n_in, n_out, "bias"))
    return ps


def _lin(x: Node, params: dict, prefix: str) -> Node:
    return F.linear(x, params[prefix + "weight"], params.get(prefix + "bias"))


def _norm_params(prefix: str, d: int, kind: str) -> list[ParamDecl]:
    ps = [ParamDecl(f"{prefix}weight", (d,), "ones", d, d, "norm")]
    if kind == "layer_norm":
        ps.append(ParamDecl(f"{prefix}bias", (d,), "zeros", d, d, "norm"))
    return ps


def _norm(x: Node, params: dict, prefix: str, kind: str, eps: float) -> Node:
    d = x.shape[-1]
    if kind == "rms_norm":
        return F.rms_norm(x, d, params[prefix + "weight"], eps)
    return F.layer_norm(x, d, params[prefix + "weight"], params[prefix + "bias"], eps)


def _act(x: Node, kind: str) -> Node:
    return {"relu": F.relu, "gelu": F.gelu, "silu": F.silu, "tanh": F.tanh}[kind](x)


# ---- elementwise ----------------------------------------------------------------------------------------
def _unary(name: str, fn: Callable[[Node, dict], Node], attrs: dict | None = None, doc: str = "") -> None:
    register(Layer(name, attrs or {}, lambda s, d, a, _n=name: _same_float(_n, s, d),
                   lambda xs, p, a, ctx, _f=fn: _f(xs[0], a), doc=doc))


_unary("relu", lambda x, a: F.relu(x))
_unary("gelu", lambda x, a: F.gelu(x, a["approximate"]),
       {"approximate": Attr("str", "none", choices=("none", "tanh"))})
_unary("silu", lambda x, a: F.silu(x))
_unary("tanh", lambda x, a: F.tanh(x))
_unary("sigmoid", lambda x, a: F.sigmoid(x))


def _dropout_fwd(xs, p, a, ctx):
    if not ctx.training or a["p"] == 0.0:
        return xs[0]
    return F.dropout(xs[0], a["p"], ctx.gen(), True)


register(Layer("dropout", {"p": Attr("float", 0.5, 0.0, 1.0, hi_open=True)},
               lambda s, d, a: _same_float("dropout", s, d), _dropout_fwd,
               doc="inverted dropout; identity in eval"))


def _along_axis(op: str):
    """infer() of a float op that keeps its input's shape and works along attr `axis` (softmax, l2_normalize)."""
    def infer(s, d, a):
        _float_in(op, d)
        _rank(op, s[0], 1)
        _axis(op, a["axis"], len(s[0]))
        return tuple(s[0]), d[0]
    return infer


def _batched_axis(x: Node, axis: int) -> int:
    return axis if axis < 0 else axis + 1


register(Layer("softmax", {"axis": Attr("int", -1, -64, 63)}, _along_axis("softmax"),
               lambda xs, p, a, ctx: F.softmax(xs[0], _batched_axis(xs[0], a["axis"]))))


# ---- linear and norms -----------------------------------------------------------------------------------
def _linear_infer(s, d, a):
    _float_in("linear", d)
    _rank("linear", s[0], 1)
    return tuple(s[0][:-1]) + (a["out"],), d[0]


register(Layer(
    "linear",
    {"out": Attr("int", REQUIRED, 1, MAX_SIZE), "bias": Attr("bool", True),
     "init": Attr("str", "kaiming_uniform", catalog="init")},
    _linear_infer,
    lambda xs, p, a, ctx: _lin(xs[0], p, ""),
    lambda s, a: _linear_params("", s[0][-1], a["out"], a["init"], a["bias"]),
    doc="y = x W^T + b over the last axis"))


def _norm_infer(op):
    def infer(s, d, a):
        _float_in(op, d)
        _rank(op, s[0], 1)
        return tuple(s[0]), d[0]
    return infer


register(Layer("layer_norm", {"eps": Attr("float", 1e-5, 0.0, 1.0, lo_open=True, hi_open=True)},
               _norm_infer("layer_norm"),
               lambda xs, p, a, ctx: _norm(xs[0], p, "", "layer_norm", a["eps"]),
               lambda s, a: _norm_params("", s[0][-1], "layer_norm"), doc="over the last axis"))
register(Layer("rms_norm", {"eps": Attr("float", 1e-6, 0.0, 1.0, lo_open=True, hi_open=True)},
               _norm_infer("rms_norm"),
               lambda xs, p, a, ctx: _norm(xs[0], p, "", "rms_norm", a["eps"]),
               lambda s, a: _norm_params("", s[0][-1], "rms_norm"), doc="over the last axis"))


# ---- embeddings -----------------------------------------------------------------------------------------
def _embedding_infer(s, d, a):
    if d[0] not in ("i32", "u32", "i8"):
        raise DTypeError(f"embedding needs integer token ids, got {d[0]}",
                         hint="declare input = { shape = [...], dtype = \"i32\" }")
    return tuple(s[0]) + (a["dim"],), "f32"


register(Layer(
    "embedding",
    {"vocab": Attr("int", REQUIRED, 1, MAX_SIZE), "dim": Attr("int", REQUIRED, 1, MAX_SIZE),
     "init": Attr("str", "normal", catalog="init")},
    _embedding_infer,
    lambda xs, p, a, ctx: F.embedding(p["weight"], xs[0]),
    lambda s, a: [ParamDecl("weight", (a["vocab"], a["dim"]), a["init"], a["vocab"], a["dim"], "embedding")],
    doc="token id -> learned vector"))


def _posemb_infer(s, d, a):
    _float_in("positional_embedding", d)
    _rank("positional_embedding", s[0], 2, 2, " [seq, dim]")
    if s[0][0] > a["max_len"]:
        raise ShapeError(f"sequence length {s[0][0]} exceeds max_len {a['max_len']}",
                         hint=f"raise max_len to at least {s[0][0]}")
    return tuple(s[0]), d[0]


def _posemb_fwd(xs, p, a, ctx):
    x = xs[0]
    table = F.getitem(p["weight"], (slice(0, x.shape[1]),))
    return F.add(x, table)


register(Layer(
    "positional_embedding",
    {"max_len": Attr("int", REQUIRED, 1, MAX_SIZE), "init": Attr("str", "normal", catalog="init")},
    _posemb_infer, _posemb_fwd,
    lambda s, a: [ParamDecl("weight", (a["max_len"], s[0][1]), a["init"], a["max_len"], s[0][1], "embedding")],
    doc="learned positions, added to [seq, dim] input"))


# ---- convolution and pooling ----------------------------------------------------------------------------
_PAIR_POS = dict(lo=1, hi=1024)


def _conv_infer(s, d, a):
    _float_in("conv2d", d)
    _rank("conv2d", s[0], 3, 3, " [channels, height, width]")
    c, h, w = s[0]
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = (_pair(a[k]) for k in ("kernel", "stride", "padding", "dilation"))
    oh, ow = conv_out(h, kh, sh, ph, dh), conv_out(w, kw, sw, pw, dw)
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"conv2d kernel {(kh, kw)} (padding {(ph, pw)}, dilation {(dh, dw)}) does not fit "
                         f"input {tuple(s[0])}", hint="use a smaller kernel or add padding")
    return (a["out"], oh, ow), d[0]


def _conv_params(s, a):
    c = s[0][0]
    kh, kw = _pair(a["kernel"])
    ps = [ParamDecl("weight", (a["out"], c, kh, kw), a["init"], c * kh * kw, a["out"] * kh * kw, "weight")]
    if a["bias"]:
        ps.append(ParamDecl("bias", (a["out"],), "zeros", c * kh * kw, a["out"] * kh * kw, "bias"))
    return ps


register(Layer(
    "conv2d",
    {"out": Attr("int", REQUIRED, 1, MAX_SIZE), "kernel": Attr("pair", REQUIRED, **_PAIR_POS),
     "stride": Attr("pair", 1, **_PAIR_POS), "padding": Attr("pair", 0, 0, 1024),
     "dilation": Attr("pair", 1, **_PAIR_POS), "bias": Attr("bool", True),
     "init": Attr("str", "kaiming_uniform", catalog="init")},
    _conv_infer,
    lambda xs, p, a, ctx: F.conv2d(xs[0], p["weight"], p.get("bias"), _pair(a["stride"]), _pair(a["padding"]),
                                   _pair(a["dilation"])),
    _conv_params, doc="2-D cross-correlation on [channels, height, width]"))


def _pool_infer(op):
    def infer(s, d, a):
        _float_in(op, d)
        _rank(op, s[0], 3, 3, " [channels, height, width]")
        c, h, w = s[0]
        k = _pair(a["kernel"])
        st = _pair(a["stride"] if a["stride"] is not None else a["kernel"])
        pd = _pair(a["padding"])
        if pd[0] > k[0] // 2 or pd[1] > k[1] // 2:
            raise ShapeError(f"{op} padding {pd} must be at most half the kernel {k}")
        oh, ow = conv_out(h, k[0], st[0], pd[0], 1), conv_out(w, k[1], st[1], pd[1], 1)
        if oh <= 0 or ow <= 0:
            raise ShapeError(f"{op} kernel {k} does not fit input {tuple(s[0])}")
        return (c, oh, ow), d[0]
    return infer


_POOL_ATTRS = {"kernel": Attr("pair", REQUIRED, **_PAIR_POS), "stride": Attr("pair", None, **_PAIR_POS),
               "padding": Attr("pair", 0, 0, 512)}
register(Layer("max_pool2d", _POOL_ATTRS, _pool_infer("max_pool2d"),
               lambda xs, p, a, ctx: F.max_pool2d(xs[0], _pair(a["kernel"]),
                                                  _pair(a["stride"] if a["stride"] is not None else a["kernel"]),
                                                  _pair(a["padding"])),
               doc="stride defaults to the kernel"))
register(Layer("avg_pool2d", _POOL_ATTRS, _pool_infer("avg_pool2d"),
               lambda xs, p, a, ctx: F.avg_pool2d(xs[0], _pair(a["kernel"]),
                                                  _pair(a["stride"] if a["stride"] is not None else a["kernel"]),
                                                  _pair(a["padding"])),
               doc="counts padded zeros, like torch's default"))


# ---- shape ops ------------------------------------------------------------------------------------------
register(Layer("flatten", {}, lambda s, d, a: ((math.prod(s[0]),), d[0]),
               lambda xs, p, a, ctx: F.reshape(xs[0], (xs[0].shape[0], math.prod(xs[0].shape[1:]))),
               doc="all per-example axes into one"))


def _reshape_infer(s, d, a):
    shape = list(a["shape"])
    n = math.prod(s[0])
    if shape.count(-1) > 1:
        raise ShapeError(f"reshape to {tuple(shape)}: at most one -1 is allowed")
    if -1 in shape:
        rest = math.prod(x for x in shape if x != -1)
        if rest == 0 or n % rest:
            raise ShapeError(f"cannot reshape {tuple(s[0])} ({n} elements) to {tuple(shape)}")
        shape[shape.index(-1)] = n // rest
    if math.prod(shape) != n:
        raise ShapeError(f"cannot reshape {tuple(s[0])} ({n} elements) to {tuple(shape)} "
                         f"({math.prod(shape)} elements)")
    return tuple(shape), d[0]


register(Layer("reshape", {"shape": Attr("shape", REQUIRED)}, _reshape_infer,
               lambda xs, p, a, ctx: F.reshape(xs[0], (xs[0].shape[0],) + _reshape_infer(
                   [xs[0].shape[1:]], [xs[0].dtype], a)[0]),
               doc="per-example shape, batch axis kept"))


def _add_infer(s, d, a):
    first = tuple(s[0])
    for other in s[1:]:
        if tuple(other) != first:
            raise ShapeError(f"add needs inputs of one shape, got {first} and {tuple(other)}",
                             hint="insert a 'linear' or 'reshape' node so the shapes agree")
    for other in d[1:]:
        if other != d[0]:
            raise DTypeError(f"add needs inputs of one dtype, got {d[0]} and {other}")
    return first, d[0]


def _add_fwd(xs, p, a, ctx):
    y = xs[0]
    for x in xs[1:]:
        y = F.add(y, x)
    return y


register(Layer("add", {}, _add_infer, _add_fwd, arity=(2, None), doc="elementwise sum of 2+ inputs"))


def _concat_infer(s, d, a):
    rank = len(s[0])
    _rank("concat", s[0], 1)
    ax = _axis("concat", a["axis"], rank)
    for other in s[1:]:
        if len(other) != rank or any(other[k] != s[0][k] for k in range(rank) if k != ax):
            raise ShapeError(f"concat on axis {a['axis']} needs shapes equal elsewhere, got "
                             f"{' and '.join(str(tuple(x)) for x in s)}")
    for other in d[1:]:
        if other != d[0]:
            raise DTypeError(f"concat needs inputs of one dtype, got {d[0]} and {other}")
    out = list(s[0])
    out[ax] = sum(x[ax] for x in s)
    return tuple(out), d[0]


register(Layer("concat", {"axis": Attr("int", -1, -64, 63)}, _concat_infer,
               lambda xs, p, a, ctx: F.concat(xs, _batched_axis(xs[0], a["axis"])), arity=(2, None),
               doc="join 2+ inputs on a per-example axis"))


def _mean_pool_infer(s, d, a):
    _float_in("mean_pool", d)
    _rank("mean_pool", s[0], 1)
    ax = _axis("mean_pool", a["axis"], len(s[0]))
    return tuple(x for i, x in enumerate(s[0]) if i != ax), d[0]


register(Layer("mean_pool", {"axis": Attr("int", 0, -64, 63)}, _mean_pool_infer,
               lambda xs, p, a, ctx: F.mean(xs[0], _axis("mean_pool", a["axis"], len(xs[0].shape) - 1) + 1),
               doc="mean over the sequence axis ([seq, dim] -> [dim])"))


def _last_infer(s, d, a):
    _rank("last_token", s[0], 2)
    return tuple(s[0][1:]), d[0]


register(Layer("last_token", {}, _last_infer, lambda xs, p, a, ctx: F.getitem(xs[0], (slice(None), -1)),
               doc="the last position of the sequence ([seq, dim] -> [dim])"))


# ---- attention ------------------------------------------------------------------------------------------
def _mha_params(prefix: str, d: int, init: str, bias: bool) -> list[ParamDecl]:
    out = []
    for p in ("q", "k", "v", "o"):
        out += _linear_params(f"{prefix}{p}.", d, d, init, bias)
    return out


def _heads_attention(x: Node, params: dict, qkv: tuple[str, str, str], heads: int, causal: bool = False,
                     mask: Node | None = None, drop: tuple = (0.0, None)) -> Node:
    """Attention over the q/k/v projections of x (linear prefixes `qkv`), split into heads and merged back:
    [B, L, D] -> [B, L, D], before any output projection. drop: (probability, stream) of dropout on the
    attention probabilities (`_attn_drop`)."""
    b, L, d = x.shape
    dh = d // heads
    ws = [params[pre + "weight"] for pre in qkv]
    bs = [params.get(pre + "bias") for pre in qkv]
    if all(t is None for t in bs) or all(t is not None for t in bs):
        # one product over the three weights side by side ([3D, D]; their gradients come back as row
        # slices of one): a single wide matmul, its input gradient one K = 3D product and its weight
        # gradient one [3D, D] product, in place of three of each (the H200's GPT step: RESULTS.md)
        y3 = F.linear(x, F.concat(ws, 0), F.concat(bs, 0) if bs[0] is not None else None)
        y3 = F.permute(F.reshape(y3, (b, L, 3, heads, dh)), (2, 0, 3, 1, 4))      # [3, B, H, L, Dh]
        q, k, v = (F.getitem(y3, i) for i in range(3))
    else:
        q, k, v = (F.permute(F.reshape(_lin(x, params, pre), (b, L, heads, dh)), (0, 2, 1, 3)) for pre in qkv)
    y = F.attention(q, k, v, causal=causal, mask=mask, dropout=drop[0], gen=drop[1])
    return F.reshape(F.permute(y, (0, 2, 1, 3)), (b, L, d))


def _attn_drop(a: dict, ctx: LayerCtx) -> tuple:
    """(probability, stream) of a layer's dropout on its attention probabilities (attr `attn_dropout`, as
    torch's MultiheadAttention dropout and BERT's attention_probs_dropout_prob): training only, drawn from the
    node's own sub-stream `dropout/<node>.attn_probs`, so every backend and path draws the same mask."""
    p = a.get("attn_dropout", 0.0)
    if not ctx.training or not p:
        return 0.0, None
    return p, ctx.gen("attn_probs")


_ATTN_DROP = Attr("float", 0.0, 0.0, 1.0, hi_open=True)


def _mha(x: Node, params: dict, prefix: str, heads: int, causal: bool, drop: tuple = (0.0, None)) -> Node:
    y = _heads_attention(x, params, (f"{prefix}q.", f"{prefix}k.", f"{prefix}v."), heads, causal=causal, drop=drop)
    return _lin(y, params, f"{prefix}o.")


def _attn_infer(op):
    def infer(s, d, a):
        _float_in(op, d)
        _rank(op, s[0], 2, 2, " [seq, dim]")
        dim = s[0][1]
        if dim % a["heads"]:
            raise ShapeError(f"{op} dim {dim} is not divisible by heads={a['heads']}",
                             hint=f"pick heads among the divisors of {dim}")
        return tuple(s[0]), d[0]
    return infer


register(Layer(
    "attention",
    {"heads": Attr("int", REQUIRED, 1, 1024), "causal": Attr("bool", False), "bias": Attr("bool", True),
     "attn_dropout": _ATTN_DROP, "init": Attr("str", "xavier_uniform", catalog="init")},
    _attn_infer("attention"),
    lambda xs, p, a, ctx: _mha(xs[0], p, "", a["heads"], a["causal"], _attn_drop(a, ctx)),
    lambda s, a: _mha_params("", s[0][1], a["init"], a["bias"]),
    doc="multi-head self-attention over [seq, dim] with q/k/v/o projections; attn_dropout drops attention "
        "probabilities in training"))


def _hidden(d: int, ratio: float) -> int:
    return max(1, int(round(d * ratio)))


def _block_params(s, a):
    d = s[0][1]
    h = _hidden(d, a["mlp_ratio"])
    return (_norm_params("ln1.", d, a["norm"]) + _mha_params("attn.", d, a["init"], True)
            + _norm_params("ln2.", d, a["norm"]) + _linear_params("mlp.fc1.", d, h, a["init"], True)
            + _linear_params("mlp.fc2.", h, d, a["init"], True))


def _block_fwd(xs, p, a, ctx):
    x = xs[0]

    def drop(t: Node, name: str) -> Node:
        if not ctx.training or a["dropout"] == 0.0:
            return t
        return F.dropout(t, a["dropout"], ctx.gen(name), True)

    outer = current_scope()         # a profile names the block's halves: "<block>.attn", "<block>.mlp"
    with scope(f"{outer}.attn" if outer else "attn"):
        h = F.add(x, drop(_mha(_norm(x, p, "ln1.", a["norm"], a["eps"]), p, "attn.", a["heads"], a["causal"],
                               _attn_drop(a, ctx)), "attn"))
    with scope(f"{outer}.mlp" if outer else "mlp"):
        m = _lin(_act(_lin(_norm(h, p, "ln2.", a["norm"], a["eps"]), p, "mlp.fc1."), a["activation"]), p, "mlp.fc2.")
        return F.add(h, drop(m, "mlp"))


register(Layer(
    "transformer_block",
    {"heads": Attr("int", REQUIRED, 1, 1024), "mlp_ratio": Attr("float", 4.0, 0.0, 64.0, lo_open=True),
     "causal": Attr("bool", False), "dropout": Attr("float", 0.0, 0.0, 1.0, hi_open=True),
     "attn_dropout": _ATTN_DROP, "norm": Attr("str", "layer_norm", choices=("layer_norm", "rms_norm")),
     "activation": Attr("str", "gelu", choices=("gelu", "relu", "silu", "tanh")),
     "eps": Attr("float", 1e-5, 0.0, 1.0, lo_open=True, hi_open=True),
     "init": Attr("str", "xavier_uniform", catalog="init")},
    _attn_infer("transformer_block"), _block_fwd, _block_params,
    doc="pre-norm: x + attn(norm(x)), then x + mlp(norm(x)); dropout on both residual branches, attn_dropout "
        "on the attention probabilities"))


# ---- attr validation ------------------------------------------------------------------------------------
def check_attrs(layer: Layer, node: dict, path: tuple, ck: Checker) -> dict:
    """Validate a node's attrs against `layer` (unknown, missing, type, range, names); defaults filled."""
    out: dict = {}
    reserved = ("name", "op", "in")
    allowed = tuple(layer.attrs) + reserved
    for k in node:
        if k in reserved:
            continue
        if k not in layer.attrs:
            takes = ", ".join(layer.attrs) or "no attrs"
            ck.error(path + (k,), f"op {layer.name!r} has no attr {k!r}",
                     did_you_mean(k, allowed) or f"{layer.name} takes: {takes}", value=False, kind="unknown-key",
                     key=k)
    for k, spec in layer.attrs.items():
        if k not in node:
            if spec.default is REQUIRED:
                ck.error(path, f"op {layer.name!r} needs attr {k!r}", f"add {k} = ... to this node", value=False,
                         kind="missing", key=k)
                continue
            out[k] = spec.default
            continue
        out[k] = _check_attr(layer, k, spec, node, path, ck)
    return out


def _check_attr(layer: Layer, k: str, spec: Attr, node: dict, path: tuple, ck: Checker):
    v = node[k]
    p = path + (k,)
    bad = len(ck.diags)
    if spec.type == "int":
        r = ck.integer(node, k, path, int(spec.lo), int(spec.hi))
    elif spec.type == "float":
        r = ck.number(node, k, path, spec.lo, spec.hi, lo_open=spec.lo_open, hi_open=spec.hi_open)
    elif spec.type == "bool":
        r = ck.boolean(node, k, path)
    elif spec.type == "str":
        r = ck.string(node, k, path)
        if r is not None and spec.choices:
            r = ck.name_in(r, p, spec.choices, f"{layer.name} {k}")
        if r is not None and spec.catalog:
            r = ck.name_in(r, p, KNOWN[spec.catalog], spec.catalog)
    elif spec.type == "pair":
        items = v if isinstance(v, list) else [v]
        if isinstance(v, list) and len(v) != 2:
            ck.error(p, f"{format_path(p)} must be an integer or a pair [h, w], got {show(v)}", kind="type",
                     expected="int or [int, int]", got=v)
            return None
        for j, item in enumerate(items):
            sub = {k: item}
            got = ck.integer(sub, k, path, int(spec.lo), int(spec.hi))
            if got is None and isinstance(v, list):  # point at the element, not the array
                ck.diags[-1].where = ck.where(p + (j,), value=True)
        r = v if len(ck.diags) == bad else None
        if r is not None and isinstance(r, list):
            r = tuple(r)
    elif spec.type == "shape":
        ok = isinstance(v, list) and v and all(isinstance(x, int) and not isinstance(x, bool)
                                               and (x == -1 or 1 <= x <= MAX_SIZE) for x in v)
        if not ok:
            ck.error(p, f"{format_path(p)} must be an array of positive integers (one may be -1), got {show(v)}"
                     f" ({kind_of(v)})", kind="type", expected="array of int", got=v)
            return None
        r = tuple(v)
    else:  # pragma: no cover - a declaration bug, not a user error
        raise AssertionError(spec.type)
    return r



# ---- BERT-style encoders --------------------------------------------------------------------------------
# Parameter names are the ones BERT checkpoints use (word_embeddings.weight, attention.self.query.weight,
# output.LayerNorm.bias, ...), so a BERT-family checkpoint loads by renaming node prefixes only (see
# spec/pretrained.py). The padding mask comes from the token ids themselves (id != pad_id): a node that
# needs it takes the ids as its second input (`in = ["prev", "x"]`), so padded positions are never
# attended to and never pooled, and a sentence embeds the same at any padded length.
_ID_DTYPES = ("i32", "u32")


def _ids_of(op: str, shape: tuple, dtype: str, seq: int | None = None) -> None:
    if dtype not in _ID_DTYPES:
        raise DTypeError(f"{op} needs integer token ids, got {dtype}",
                         hint="declare input = { shape = [seq_len], dtype = \"i32\" }")
    _rank(op, shape, 1, 1, " [seq] of token ids")
    if seq is not None and shape[0] != seq:
        raise ShapeError(f"{op}: token ids have length {shape[0]} but the hidden states have {seq} positions",
                         hint="pass the model input x (the ids of these positions) as the second input")


def _pad_mask(ids: Node, pad_id: int) -> Node:
    """bool [B, L]: True at real tokens."""
    return F.ne(ids, pad_id)


def _bert_emb_infer(s, d, a):
    _ids_of("bert_embeddings", s[0], d[0])
    if s[0][0] > a["max_len"]:
        raise ShapeError(f"sequence length {s[0][0]} exceeds max_len {a['max_len']}",
                         hint=f"raise max_len to at least {s[0][0]} or shorten seq_len")
    return (s[0][0], a["dim"]), "f32"


def _bert_emb_params(s, a):
    v, d, L, t, init = a["vocab"], a["dim"], a["max_len"], a["type_vocab"], a["init"]
    return [ParamDecl("word_embeddings.weight", (v, d), init, v, d, "embedding"),
            ParamDecl("position_embeddings.weight", (L, d), init, L, d, "embedding"),
            ParamDecl("token_type_embeddings.weight", (t, d), init, t, d, "embedding"),
            ParamDecl("LayerNorm.weight", (d,), "ones", d, d, "norm"),
            ParamDecl("LayerNorm.bias", (d,), "zeros", d, d, "norm")]


def _drop(t: Node, p: float, ctx: LayerCtx, name: str) -> Node:
    if not ctx.training or p == 0.0:
        return t
    return F.dropout(t, p, ctx.gen(name), True)


def _bert_emb_fwd(xs, p, a, ctx):
    ids = xs[0]
    L, d = ids.shape[1], a["dim"]
    h = F.embedding(p["word_embeddings.weight"], ids)                                   # [B, L, D]
    h = F.add(h, F.getitem(p["position_embeddings.weight"], (slice(0, L),)))           # positions 0..L-1
    h = F.add(h, F.getitem(p["token_type_embeddings.weight"], (slice(0, 1),)))         # segment 0
    h = F.layer_norm(h, d, p["LayerNorm.weight"], p["LayerNorm.bias"], a["eps"])
    return _drop(h, a["dropout"], ctx, "")


_BERT_EPS = Attr("float", 1e-12, 0.0, 1.0, lo_open=True, hi_open=True)
_BERT_DROP = Attr("float", 0.0, 0.0, 1.0, hi_open=True)
register(Layer(
    "bert_embeddings",
    {"vocab": Attr("int", REQUIRED, 1, MAX_SIZE), "dim": Attr("int", REQUIRED, 1, MAX_SIZE),
     "max_len": Attr("int", 512, 1, MAX_SIZE), "type_vocab": Attr("int", 2, 1, MAX_SIZE), "eps": _BERT_EPS,
     "dropout": _BERT_DROP, "init": Attr("str", "normal", catalog="init")},
    _bert_emb_infer, _bert_emb_fwd, _bert_emb_params,
    doc="token ids [seq] -> LayerNorm(word + position + token-type-0 embeddings) [seq, dim] (BERT)"))


def _bert_block_infer(s, d, a):
    _float_in("bert_block", d[:1])
    _rank("bert_block", s[0], 2, 2, " [seq, dim]")
    dim = s[0][1]
    if dim % a["heads"]:
        raise ShapeError(f"bert_block dim {dim} is not divisible by heads={a['heads']}",
                         hint=f"pick heads among the divisors of {dim}")
    if len(s) == 2:
        _ids_of("bert_block", s[1], d[1], s[0][0])
    return tuple(s[0]), d[0]


def _bert_block_params(s, a):
    d = s[0][1]
    h = a["hidden"] or 4 * d
    init = a["init"]
    out = []
    for n in ("attention.self.query.", "attention.self.key.", "attention.self.value.", "attention.output.dense."):
        out += _linear_params(n, d, d, init, True)
    out += _norm_params("attention.output.LayerNorm.", d, "layer_norm")
    out += _linear_params("intermediate.dense.", d, h, init, True)
    out += _linear_params("output.dense.", h, d, init, True)
    out += _norm_params("output.LayerNorm.", d, "layer_norm")
    return out


def _bert_self_attention(x: Node, p: dict, heads: int, mask: Node | None, drop: tuple = (0.0, None)) -> Node:
    return _heads_attention(x, p, ("attention.self.query.", "attention.self.key.", "attention.self.value."),
                            heads, mask=mask, drop=drop)


def _bert_block_fwd(xs, p, a, ctx):
    x = xs[0]
    d, eps = x.shape[-1], a["eps"]
    mask = None
    if len(xs) == 2:                                   # key padding mask [B, 1, 1, L], broadcast over heads/queries
        ids = xs[1]
        mask = F.reshape(_pad_mask(ids, a["pad_id"]), (ids.shape[0], 1, 1, ids.shape[1]))
    att = _lin(_bert_self_attention(x, p, a["heads"], mask, _attn_drop(a, ctx)), p, "attention.output.dense.")
    h = F.layer_norm(F.add(x, _drop(att, a["dropout"], ctx, "attn")), d, p["attention.output.LayerNorm.weight"],
                     p["attention.output.LayerNorm.bias"], eps)
    m = _lin(_act(_lin(h, p, "intermediate.dense."), a["activation"]), p, "output.dense.")
    return F.layer_norm(F.add(h, _drop(m, a["dropout"], ctx, "mlp")), d, p["output.LayerNorm.weight"],
                        p["output.LayerNorm.bias"], eps)


register(Layer(
    "bert_block",
    {"heads": Attr("int", REQUIRED, 1, 1024), "hidden": Attr("int", 0, 0, MAX_SIZE),
     "pad_id": Attr("int", 0, 0, MAX_SIZE),
     "activation": Attr("str", "gelu", choices=("gelu", "relu", "silu", "tanh")), "eps": _BERT_EPS,
     "dropout": _BERT_DROP, "attn_dropout": _ATTN_DROP, "init": Attr("str", "xavier_uniform", catalog="init")},
    _bert_block_infer, _bert_block_fwd, _bert_block_params, arity=(1, 2),
    doc="post-LN encoder layer: h = LN(x + attn(x)), LN(h + mlp(h)); in = [hidden, ids] masks ids == pad_id "
        "(hidden = 0: 4 x dim; gelu is exact)"))


def _masked_mean_infer(s, d, a):
    _float_in("masked_mean_pool", d[:1])
    _rank("masked_mean_pool", s[0], 2, 2, " [seq, dim]")
    if len(s) == 2:
        _ids_of("masked_mean_pool", s[1], d[1], s[0][0])
    return (s[0][1],), d[0]


def _masked_mean_fwd(xs, p, a, ctx):
    h = xs[0]
    if len(xs) == 1:
        return F.mean(h, 1)
    b, L, _ = h.shape
    m = F.where(_pad_mask(xs[1], a["pad_id"]), F.scalar(1.0, h.dtype), F.scalar(0.0, h.dtype))   # [B, L]
    total = F.sum_(F.mul(h, F.reshape(m, (b, L, 1))), 1)                                        # [B, D]
    count = F.maximum(F.sum_(m, 1, keepdims=True), F.scalar(1e-9, h.dtype))                      # [B, 1]
    return F.div(total, count)


register(Layer("masked_mean_pool", {"pad_id": Attr("int", 0, 0, MAX_SIZE)}, _masked_mean_infer, _masked_mean_fwd,
               arity=(1, 2),
               doc="mean over the real tokens: in = [hidden [seq, dim], ids [seq]] skips ids == pad_id -> [dim]"))


def _l2_fwd(xs, p, a, ctx):
    x = xs[0]
    ax = _batched_axis(x, a["axis"])
    norm = F.sqrt(F.sum_(F.mul(x, x), ax, keepdims=True))
    return F.div(x, F.maximum(norm, F.scalar(a["eps"], x.dtype)))


register(Layer("l2_normalize", {"axis": Attr("int", -1, -64, 63),
                                "eps": Attr("float", 1e-12, 0.0, 1.0, lo_open=True, hi_open=True)},
               _along_axis("l2_normalize"), _l2_fwd, doc="x / max(||x||_2, eps) along axis (torch.nn.functional.normalize)"))
