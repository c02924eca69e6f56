"""The `fused` op: a fused elementwise group's instruction list (program/fusion.py) as one kernel.

The body is assembled from named pieces of kernels/fused.wgsl (one `let` per instruction, the f16
rounding, literals, the store) around op expressions from kernels/ops.wgsl: no shader text here.
"""
from __future__ import annotations

import struct

import numpy as np

from ..templates import WGSL_TYPE, snippet
from .registry import launcher
from .elementwise import compute_type, load, op_expr, run_strided
from .strided import broadcast_strides, contiguous_strides


def _literal(value, dtype: str) -> str:
    if dtype in ("f32", "f16"):
        v = np.float32(np.float16(value)) if dtype == "f16" else np.float32(value)
        return snippet("fused", "literal.float", BITS=struct.unpack('<I', v.tobytes())[0])
    if dtype == "i32":
        return snippet("fused", "literal.i32", V=int(value))
    return snippet("fused", "literal.u32", V=int(bool(value)) if dtype == "bool" else int(value) & 0xFFFFFFFF)


def _expr(op: str, attrs: dict, args: list[tuple[str, str]], dtype: str) -> str:
    """One instruction's WGSL expression in its compute type; args are (expression, dtype)."""
    if op == "fill":
        return _literal(attrs["value"], dtype)
    if op == "where":
        (c, _), (a, _), (b, _) = args
        return snippet("ops", "where", A=a, B=b, C=c)
    if op == "cast":
        (a, src), to = args[0], dtype
        if to == "bool":
            return snippet("ops", "cast.to_bool", A=a, ZERO=snippet("ops", f"zero.{compute_type(src)}"))
        if to == "i32" and src in ("f32", "f16"):
            return snippet("ops", "cast.float_to_i32", A=a)
        return snippet("ops", "cast.convert", T=compute_type(to), A=a)
    return op_expr(op, args[0][1], *(e for e, _ in args))


def body_of(code, in_dtypes: list[str], out_dtype: str) -> str:
    lines = []
    for j, (op, attrs, refs, shape, dtype) in enumerate(code):
        args = []
        for kind, k in refs:
            if kind == "in":
                args.append((load(k, in_dtypes[k]), in_dtypes[k]))
            else:
                args.append((snippet("fused", "temp", J=k), code[k][4]))
        e = _expr(op, dict(attrs), args, dtype)
        if dtype == "f16":
            e = snippet("fused", "round_f16", EXPR=e)    # round as a store of the f16 intermediate would
        lines.append(snippet("fused", "let", J=j, EXPR=e))
    lines.append(snippet("fused", "store", T=WGSL_TYPE[out_dtype], J=len(code) - 1))
    return "\n".join(lines)


@launcher("fused")
def _fused(be, v, ins, out):
    body = body_of(v.attrs["code"], [s.dtype for s in ins], v.dtype)
    shape = v.shape
    run_strided(be, "fused", body, out, contiguous_strides(shape), 0,
                [(s, broadcast_strides(s.shape, shape), 0) for s in ins], shape, template="fused",
                also_dtypes=tuple(c[4] for c in v.attrs["code"]))
