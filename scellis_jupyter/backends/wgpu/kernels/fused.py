"""The `fused` op: WGSL generated from a fused elementwise group's instruction list (program/fusion.py)."""
from __future__ import annotations

import re
import struct

import numpy as np

from ....errors import DTypeError
from ..templates import WGSL_TYPE
from .registry import launcher
from .elementwise import BINARY, COMPARE, FLOAT_UNARY, INT_UNARY, compute_type, run_strided
from .strided import broadcast_strides, contiguous_strides


def _subst(expr: str, **args: str) -> str:
    """Put argument expressions in for the placeholders `a`, `b` of a kernel-table expression."""
    return re.sub(r"\b([ab])\b", lambda m: f"({args[m.group(1)]})", expr)


def _literal(value, dtype: str) -> str:
    if dtype in ("f32", "f16"):
        v = np.float32(np.float16(value)) if dtype == "f16" else np.float32(value)
        return f"bitcast<f32>({struct.unpack('<I', v.tobytes())[0]}u)"
    if dtype == "i32":
        return f"i32({int(value)})"
    return f"{int(bool(value)) if dtype == 'bool' else int(value) & 0xFFFFFFFF}u"


def _expr(op: str, attrs: dict, args: list[tuple[str, str]], dtype: str) -> str:
    """One instruction's WGSL expression in its compute type; args are (expression, dtype)."""
    if op == "fill":
        return _literal(attrs["value"], dtype)
    if op == "where":
        (c, _), (a, _), (b, _) = args
        return f"select({b}, {a}, ({c}) != 0u)"
    if op == "cast":
        (a, src), to = args[0], dtype
        if to == "bool":
            zero = {"f32": "0.0", "f16": "0.0", "i32": "0"}.get(src, "0u")
            return f"select(0u, 1u, ({a}) != {zero})"
        if to == "i32" and src in ("f32", "f16"):
            return f"select(i32(trunc({a})), 0, ({a}) != ({a}))"
        return f"{compute_type(to)}({a})"
    d = args[0][1]
    if len(args) == 1:
        table = FLOAT_UNARY if d in ("f32", "f16") else INT_UNARY
        if op not in table:
            raise DTypeError(f"op '{op}' is not defined for {d}", where=f"op '{op}'")
        return _subst(table[op], a=args[0][0])
    if op in COMPARE:
        return f"select(0u, 1u, {_subst(COMPARE[op], a=args[0][0], b=args[1][0])})"
    if d not in ("f32", "f16") and op == "pow":
        raise DTypeError("integer pow is not supported on wgpu", where="op 'pow'", hint="cast to f32")
    return _subst(BINARY[op], a=args[0][0], b=args[1][0])


def body_of(code, in_dtypes: list[str], out_dtype: str) -> str:
    lines = []
    for j, (op, attrs, refs, shape, dtype) in enumerate(code):
        args = []
        for kind, k in refs:
            if kind == "in":
                args.append((f"{compute_type(in_dtypes[k])}(x{k}[o[{k + 1}]])", in_dtypes[k]))
            else:
                args.append((f"t{k}", code[k][4]))
        e = _expr(op, dict(attrs), args, dtype)
        if dtype == "f16":
            e = f"f32(f16({e}))"     # round as a store of the f16 intermediate would
        lines.append(f"let t{j} = {e};")
    lines.append(f"out[o[0]] = {WGSL_TYPE[out_dtype]}(t{len(code) - 1});")
    return "\n  ".join(lines)


@launcher("fused")
def _fused(be, v, ins, out):
    body = body_of(v.attrs["code"], [s.dtype for s in ins], v.dtype)
    shape = v.shape
    run_strided(be, "fused", body, out, contiguous_strides(shape), 0,
                [(s, broadcast_strides(s.shape, shape), 0) for s in ins], shape, template="fused",
                also_dtypes=tuple(c[4] for c in v.attrs["code"]))
