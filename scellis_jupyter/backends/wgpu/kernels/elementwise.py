"""Elementwise ops, casts, fills and copies (permute/expand/slice/unslice/concat) on one strided kernel."""
from __future__ import annotations

import math
import struct

from .... import dtypes as dt
from ....errors import DTypeError, KernelError
from ..templates import WGSL_TYPE, enable_f16, render
from . import launcher
from .strided import MAX_RANK, broadcast_strides, box_chunks, collapse, contiguous_strides, window

HELPERS = """
fn tanh_s(x: f32) -> f32 {
  let e = exp(-2.0 * abs(x));
  return select(sign(x) * (1.0 - e) / (1.0 + e), tanh(x), abs(x) < 0.5);
}
fn erf_s(x: f32) -> f32 {
  let a = abs(x);
  if (a < 0.5) {
    let x2 = x * x;
    return 1.1283791670955126 * x * (1.0 + x2 * (-0.3333333333333333 + x2 * (0.1 + x2 * (-0.023809523809523808
           + x2 * (0.004629629629629629 + x2 * (-0.0007575757575757576))))));
  }
  let t = 1.0 / (1.0 + 0.3275911 * a);
  let y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * exp(-a * a);
  return sign(x) * y;
}
fn pow_s(a: f32, b: f32) -> f32 {
  if (b == 0.0) { return 1.0; }
  if (a == 0.0) { return select(0.0, bitcast<f32>(0x7f800000u), b < 0.0); }
  if (b == 1.0) { return a; }
  if (b == 2.0) { return a * a; }
  let r = exp2(b * log2(abs(a)));
  if (a < 0.0) {
    if (b != floor(b)) { return bitcast<f32>(0x7fc00000u); }
    return select(r, -r, (b * 0.5) != floor(b * 0.5));
  }
  return r;
}
"""

FLOAT_UNARY = {
    "neg": "-a", "exp": "exp(a)", "log": "log(a)", "tanh": "tanh_s(a)", "sigmoid": "1.0 / (1.0 + exp(-a))",
    "relu": "select(a, 0.0, a < 0.0)", "gelu": "0.5 * a * (1.0 + erf_s(a * 0.7071067811865476))",
    "gelu_grad": "0.5 * (1.0 + erf_s(a * 0.7071067811865476)) + a * exp(-0.5 * a * a) * 0.3989422804014327",
    "sqrt": "sqrt(a)", "rsqrt": "1.0 / sqrt(a)", "abs": "abs(a)", "sign": "sign(a)", "sin": "sin(a)",
    "cos": "cos(a)", "reciprocal": "1.0 / a", "erf": "erf_s(a)",
}
INT_UNARY = {"neg": "-a", "abs": "abs(a)", "sign": "sign(a)"}
BINARY = {"add": "a + b", "sub": "a - b", "mul": "a * b", "div": "a / b", "pow": "pow_s(a, b)",
          "maximum": "select(select(b, a, a > b), a, a != a)",
          "minimum": "select(select(b, a, a < b), a, a != a)"}
COMPARE = {"lt": "a < b", "le": "a <= b", "gt": "a > b", "ge": "a >= b", "eq": "a == b", "ne": "a != b"}


def compute_type(d: str) -> str:
    return "f32" if d in ("f32", "f16") else "i32" if d == "i32" else "u32"


def load(k: int, d: str) -> str:
    return f"{compute_type(d)}(x{k}[o[{k + 1}]])"


def store(d: str, expr: str) -> str:
    return f"{WGSL_TYPE[d]}({expr})"


def run_strided(be, name: str, body: str, out, out_strides, out_base, ins, shape, value_bits: int = 0,
                template: str = "elementwise", also_dtypes=()):
    """Dispatch BODY over `shape`; ins: list of (Storage, strides, base_elem); splits to fit bindings.

    `elementwise.wgsl` has 4 operand slots (out + 3 inputs), `fused.wgsl` 8 (out + 7 inputs).
    """
    slots = 8 if template == "fused" else 4
    if len(ins) + 1 > slots:
        raise KernelError(f"{len(ins)} inputs exceed the {slots - 1} of template {template}", where=f"op '{name}'")
    dtypes = [out.dtype] + [s.dtype for s, _, _ in ins]
    for d in dtypes:
        if d == "i8":
            raise DTypeError("i8 tensors support only casts on wgpu", where=f"op '{name}'",
                             hint="cast to f32 first")
    n = math.prod(shape)
    if n == 0:
        return
    strides = [tuple(out_strides)] + [tuple(st) for _, st, _ in ins]
    cshape, cstrides = collapse(shape, strides)
    if len(cshape) > MAX_RANK:
        raise KernelError(f"rank {len(cshape)} after collapsing exceeds {MAX_RANK}", where=f"op '{name}'")
    bases = [out_base] + [b for _, _, b in ins]
    stores = [out] + [s for s, _, _ in ins]
    isz = [dt.ITEMSIZE[d] for d in dtypes]
    decl = [f"@group(0) @binding({i + 1}) var<storage, read_write> {'out' if i == 0 else f'x{i - 1}'}: "
            f"array<{WGSL_TYPE[d]}>;" for i, d in enumerate(dtypes)]
    src = render(template, ENABLE=enable_f16(*dtypes, *also_dtypes), BINDINGS="\n".join(decl), HELPERS=HELPERS,
                 BODY=body)
    key = f"{template}:{body}:{','.join(dtypes)}"
    ops = [(b, st, i) for b, st, i in zip(bases, cstrides, isz)]
    for starts, sizes in box_chunks(cshape, ops, be.binding_limit, be.offset_align):
        wins, offs = [], []
        for s, (b, st, i) in zip(stores, ops):
            lo = sum(a * x for a, x in zip(starts, st))
            hi = lo + sum((m - 1) * x for m, x in zip(sizes, st))
            w, off = window(s, b, lo, hi, i, be.offset_align)
            wins.append(w)
            offs.append(off)
        r = len(sizes)
        shp = list(sizes) + [1] * (MAX_RANK - r)
        base = offs + [0] * (slots - len(offs))
        st_all = []
        for k in range(slots):
            st = list(cstrides[k]) if k < len(cstrides) else []
            st_all += st + [0] * (MAX_RANK - len(st))
        params = struct.pack(f"<4I{MAX_RANK}I{slots}I{slots * MAX_RANK}I", math.prod(sizes), r, value_bits, 0,
                             *shp, *base, *st_all)
        be.launch(key, src, wins, params, (math.prod(sizes) + 255) // 256)


def _contig(node_shape, out_shape):
    return broadcast_strides(node_shape, out_shape)


@launcher(*FLOAT_UNARY, *BINARY, *COMPARE)
def _elementwise(be, v, ins, out):
    d = ins[0].dtype
    if len(ins) == 1:
        table = FLOAT_UNARY if d in ("f32", "f16") else INT_UNARY
        if v.op not in table:
            raise DTypeError(f"op '{v.op}' is not defined for {d}", where=f"op '{v.op}'")
        expr = table[v.op]
        body = f"let a = {load(0, d)};\n  out[o[0]] = {store(v.dtype, expr)};"
    else:
        if v.op in COMPARE:
            expr = f"select(0u, 1u, {COMPARE[v.op]})"
        else:
            expr = BINARY[v.op]
            if d not in ("f32", "f16") and v.op == "pow":
                raise DTypeError("integer pow is not supported on wgpu", where="op 'pow'", hint="cast to f32")
        body = f"let a = {load(0, d)};\n  let b = {load(1, d)};\n  out[o[0]] = {store(v.dtype, expr)};"
    shape = v.shape
    run_strided(be, v.op, body, out, contiguous_strides(shape), 0,
                [(s, _contig(s.shape, shape), 0) for s in ins], shape)


@launcher("where")
def _where(be, v, ins, out):
    c, a, b = ins
    if v.dtype not in WGSL_TYPE:         # i8 is packed four to a word: no elementwise select over it
        raise DTypeError(f"'where' on {v.dtype} has no wgpu kernel", where="op 'where'",
                         hint="an 8-bit optimizer's guarded update runs on the reference device")
    body = (f"let c = x0[o[1]];\n  let a = {load(1, a.dtype)};\n  let b = {load(2, b.dtype)};\n"
            f"  out[o[0]] = {store(v.dtype, 'select(b, a, c != 0u)')};")
    run_strided(be, "where", body, out, contiguous_strides(v.shape), 0,
                [(s, _contig(s.shape, v.shape), 0) for s in ins], v.shape)


@launcher("cast")
def _cast(be, v, ins, out):
    (x,) = ins
    src, to = x.dtype, v.dtype
    if "i8" in (src, to):
        from .quant import cast_i8
        return cast_i8(be, v, x, out)
    a = f"x0[o[1]]"
    if to == "bool":
        zero = "0.0" if src == "f32" else "0.0h" if src == "f16" else "0"
        zero = "0u" if src in ("bool", "u32") else zero
        expr = f"select(0u, 1u, {a} != {zero})"
    elif to == "i32" and src in ("f32", "f16"):
        expr = f"select(i32(trunc(f32({a}))), 0, f32({a}) != f32({a}))"
    else:
        expr = f"{WGSL_TYPE[to]}({a})"
    run_strided(be, "cast", f"out[o[0]] = {expr};", out, contiguous_strides(v.shape), 0,
                [(x, contiguous_strides(x.shape), 0)], v.shape)


def _value_bits(value, dtype) -> int:
    if dtype in ("f32", "f16"):
        return struct.unpack("<I", struct.pack("<f", float(value)))[0]
    return int(value) & 0xFFFFFFFF


def fill(be, out, value, dtype=None, strides=None, base=0, shape=None):
    dtype = dtype or out.dtype
    shape = tuple(shape if shape is not None else out.shape)
    if dtype in ("f32", "f16"):
        expr = f"{WGSL_TYPE[dtype]}(bitcast<f32>(p.value))"
    elif dtype == "i32":
        expr = "bitcast<i32>(p.value)"
    else:
        expr = "p.value"
    run_strided(be, "fill", f"out[o[0]] = {expr};", out, strides or contiguous_strides(shape), base, [],
                shape, _value_bits(value, dtype))


@launcher("fill")
def _fill(be, v, ins, out):
    fill(be, out, v.attrs["value"])


@launcher("iota")
def _iota(be, v, ins, out):
    run_strided(be, "iota", f"out[o[0]] = {WGSL_TYPE[v.dtype]}(o[0]);", out, (1,), 0, [], v.shape)


def copy(be, name, out, out_strides, out_base, x, in_strides, in_base, shape):
    run_strided(be, name, "out[o[0]] = x0[o[1]];", out, out_strides, out_base, [(x, in_strides, in_base)], shape)


@launcher("permute")
def _permute(be, v, ins, out):
    (x,) = ins
    st = contiguous_strides(x.shape)
    copy(be, "permute", out, contiguous_strides(v.shape), 0, x, tuple(st[p] for p in v.attrs["perm"]), 0, v.shape)


@launcher("expand")
def _expand(be, v, ins, out):
    (x,) = ins
    copy(be, "expand", out, contiguous_strides(v.shape), 0, x, broadcast_strides(x.shape, v.shape), 0, v.shape)


@launcher("slice")
def _slice(be, v, ins, out):
    (x,) = ins
    st = contiguous_strides(x.shape)
    base = sum(a * s for a, s in zip(v.attrs["starts"], st))
    copy(be, "slice", out, contiguous_strides(v.shape), 0, x,
         tuple(s * k for s, k in zip(st, v.attrs["steps"])), base, v.shape)


@launcher("unslice")
def _unslice(be, v, ins, out):
    (x,) = ins
    fill(be, out, 0)
    st = contiguous_strides(v.shape)
    base = sum(a * s for a, s in zip(v.attrs["starts"], st))
    copy(be, "unslice", out, tuple(s * k for s, k in zip(st, v.attrs["steps"])), base, x,
         contiguous_strides(x.shape), 0, x.shape)


@launcher("concat")
def _concat(be, v, ins, out):
    ax = v.attrs["axis"]
    st = contiguous_strides(v.shape)
    off = 0
    for x in ins:
        copy(be, "concat", out, st, off * st[ax], x, contiguous_strides(x.shape), 0, x.shape)
        off += x.shape[ax]
