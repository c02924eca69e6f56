"""The `fused` op: a fused elementwise group's instruction list (program/fusion.py) as one kernel.

The body is assembled from named pieces of kernels/fused.wgsl (one `let` per instruction, the f16
rounding, literals, the store) around op expressions from kernels/ops.wgsl: no shader text here.

A step marked `batch = (k, n)` (program/batching.py: the same group over many tensors, such as the
optimizer's update of every parameter) is held until its batch's last member arrives; then members whose
operands share one buffer per slot (parameters and optimizer state in slabs, gradients in the arena) run
as one dispatch of kernels/fused_multi.wgsl, and any other member on its own.
"""
from __future__ import annotations

import functools
import math
import struct

import numpy as np

from .... import dtypes as dt
from ...storage import Storage
from ..templates import WGSL_TYPE, bindings, enable_f16, render, snippet
from .registry import launcher
from .elementwise import compute_type, load, op_expr, run_strided, vec_enabled
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


def body_of(code, in_dtypes: list[str], out_dtype: str, ld=None, lane=None) -> str:
    """The group's instructions, one `let` each, and the store of the last; with `ld(k)` (input k's read)
    and `lane` (the lane index), the body of one lane of kernels/elementwise_vec.wgsl instead."""
    lines = []
    for j, (op, attrs, refs, shape, dtype) in enumerate(code):
        args = []
        for kind, k in refs:
            if kind == "in":
                args.append((ld(k) if ld else load(k, in_dtypes[k]), in_dtypes[k]))
            else:
                args.append((snippet("fused", "temp", J=k), code[k][4]))
        e = _expr(op, dict(attrs), args, dtype)
        if dtype == "f16":
            e = snippet("fused", "round_f16", EXPR=e)    # round as a store of the f16 intermediate would
        lines.append(snippet("fused", "let", J=j, EXPR=e))
    if lane is not None:
        lines.append(snippet("elementwise_vec", "lane_store", T=WGSL_TYPE[out_dtype], C=lane,
                             EXPR=snippet("fused", "temp", J=len(code) - 1)))
    else:
        lines.append(snippet("fused", "store", T=WGSL_TYPE[out_dtype], J=len(code) - 1))
    return "\n".join(lines)


@functools.lru_cache(maxsize=4096)
def _cached_body(code: tuple, in_dtypes: tuple, out_dtype: str) -> str:
    return body_of(code, list(in_dtypes), out_dtype)


def _scalar_body(code: tuple, in_dtypes: tuple, out_dtype: str) -> str:
    """body_of's scalar body, once per group: a launch outside a recorded replay asks for it again each time
    (a group whose attrs hold something unhashable is written afresh)."""
    try:
        return _cached_body(code, in_dtypes, out_dtype)
    except TypeError:
        return body_of(code, list(in_dtypes), out_dtype)


@launcher("fused")
def _fused(be, v, ins, out):
    b = v.attrs.get("batch")
    if b is None or getattr(be, "unalias", False):
        # one by one where WebGPU's aliasing rule is enforced (Dawn): a batch binds one span per operand slot, and
        # an in-place member's output span overlaps its input span; each member's inputs were copied apart just
        # before it came here (runtime._unaliased), so it runs now, before the next member's copy reuses them
        return _fused_one(be, v, ins, out)
    k, n = b
    if k == 0:
        be._fused_batch = []
    pending = getattr(be, "_fused_batch", None)
    if pending is None or len(pending) != k:          # members must arrive in order, adjacent
        return _fused_one(be, v, ins, out)
    pending.append((v, ins, out))
    if k == n - 1:
        be._fused_batch = None
        _run_batch(be, pending)


MAX_MEMBERS = 128        # members per dispatch (the uniform table: 48 bytes each)


def _table_size(count: int) -> int:
    return 8 if count <= 8 else 32 if count <= 32 else MAX_MEMBERS


def _run_batch(be, members) -> None:
    """Members sharing one buffer per operand slot, within the binding limit, as one dispatch each;
    the rest one by one. Order inside a dispatch does not matter: members are independent."""
    lim, al = be.binding_limit, be.offset_align
    # the uniform block takes what the members would one by one (a batch dispatch never takes more), so
    # its size does not depend on which tensors share buffers (the planner sees stand-ins that share none)
    reserve = be.param_bytes_of(lambda: [_fused_one(be, *m) for m in members])
    start = be.param_cursor()
    buckets: dict = {}
    for m in members:
        v, ins, out = m
        stores = [out] + list(ins)
        if any(align4(s.nbytes) > lim - al for s in stores):
            buckets.setdefault(("one", id(m)), []).append(m)
            continue
        buckets.setdefault(tuple(s.buffer.uid for s in stores), []).append(m)
    for key, ms in buckets.items():
        while ms:
            chunk, ms = _fitting(ms, lim, al)
            if len(chunk) == 1:
                _fused_one(be, *chunk[0])
            else:
                _dispatch_batch(be, chunk, al)
    be.param_reserve(start, reserve)


def align4(n: int) -> int:
    return (max(n, 4) + 3) // 4 * 4


def _fitting(ms, lim: int, al: int):
    """The longest prefix of `ms` whose per-slot spans fit one binding each (and the table)."""
    take = 1
    while take < min(len(ms), MAX_MEMBERS):
        nxt = ms[:take + 1]
        ok = True
        for slot in range(len(ms[0][1]) + 1):
            ss = [(m[2] if slot == 0 else m[1][slot - 1]) for m in nxt]
            lo = min(s.offset for s in ss) // al * al
            hi = max(s.offset + align4(s.nbytes) for s in ss)
            if hi - lo > lim:
                ok = False
                break
        if not ok:
            break
        take += 1
    return ms[:take], ms[take:]


def _dispatch_batch(be, chunk, al: int) -> None:
    v0, ins0, out0 = chunk[0]
    dtypes = [out0.dtype] + [s.dtype for s in ins0]
    body = _scalar_body(v0.attrs["code"], tuple(dtypes[1:]), v0.dtype)
    slots = len(dtypes)
    wins, lows = [], []
    for slot in range(slots):
        ss = [(m[2] if slot == 0 else m[1][slot - 1]) for m in chunk]
        lo = min(s.offset for s in ss) // al * al
        hi = max(s.offset + align4(s.nbytes) for s in ss)
        wins.append(Storage(be, ss[0].buffer, lo, (hi - lo,), "u8", hi - lo))
        lows.append(lo)
    maxm = _table_size(len(chunk))
    rows, start = [], 0
    for v, ins, out in chunk:
        n = math.prod(v.shape)
        base, mask = [], 0
        for slot, s in enumerate([out] + list(ins)):
            isz = dt.ITEMSIZE[s.dtype]
            base.append((s.offset - lows[slot]) // isz)
            if slot and math.prod(s.shape) == 1 and n > 1:
                mask |= 1 << slot
        base += [0] * (8 - len(base))
        rows.append(struct.pack("<12I", *base, start, n, mask, 0))
        start += n
    rows += [bytes(48)] * (maxm - len(rows))
    params = struct.pack("<4I", len(chunk), start, 0, 0) + b"".join(rows)
    decl = bindings(*zip(["out"] + [f"x{k}" for k in range(slots - 1)], dtypes))
    also = tuple(c[4] for c in v0.attrs["code"])
    src = render("fused_multi", ENABLE=enable_f16(*dtypes, *also), BINDINGS=decl, BODY=body, MAXM=maxm)
    be.launch(f"fused_multi:{maxm}:{body}:{','.join(dtypes)}", src, wins, params, (start + 255) // 256)


def _fused_one(be, v, ins, out):
    dts = [s.dtype for s in ins]
    body = _scalar_body(v.attrs["code"], tuple(dts), v.dtype)
    shape = v.shape

    def lanes(ld, c):
        return body_of(v.attrs["code"], dts, v.dtype, ld=ld, lane=c)
    run_strided(be, "fused", body, out, contiguous_strides(shape), 0,
                [(s, broadcast_strides(s.shape, shape), 0) for s in ins], shape, template="fused",
                also_dtypes=tuple(c[4] for c in v.attrs["code"]), lanes=lanes if vec_enabled() else None)
