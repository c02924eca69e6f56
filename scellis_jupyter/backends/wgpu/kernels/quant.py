"""Casts to and from i8 on kernels/cast_i8.wgsl (called by elementwise._cast); i8 is stored packed, 4 per u32 word.

A tensor's byte size is numel; bindings are multiples of 4 bytes, so reads of the last word are
padded (arena slots and buffers are aligned, the padding belongs to the same slot). To i8: one thread
per output word packs 4 lanes (lanes past numel are written 0), so no two threads touch one word.
From i8: one thread per output element sign-extends its byte. Semantics match the reference _cast:
float -> i8 truncates toward zero, NaN -> 0 (tested on the bits: drivers may
fold x != x away), saturates to [-128, 127]; i32/u32 -> i8 wraps modulo 256
(numpy astype); bool -> i8 is 0/1; i8 -> bool is x != 0. Large tensors are processed in chunks of
whole words so every binding fits `be.binding_limit`.
"""
from __future__ import annotations

import math
import struct

from .... import dtypes as dt
from ....errors import DTypeError, KernelError
from ..templates import WGSL_TYPE, enable_f16, render, sections, snippet
from .registry import launcher
from .strided import window
from ....graph.opset import NF4_TABLE

TO_I8 = tuple(sections("cast_i8", "convert."))     # source dtypes a cast to i8 takes
FROM_I8 = tuple(sections("cast_i8", "widen."))     # target dtypes a cast from i8 takes


def cast_i8(be, v, x, out):
    src, to = x.dtype, v.dtype
    n = math.prod(v.shape)
    if n == 0:
        return
    if to == "i8" and src not in TO_I8:
        raise DTypeError(f"cast {src} -> i8 is not supported on wgpu", where="op 'cast'")
    if to != "i8" and to not in FROM_I8:
        raise DTypeError(f"cast i8 -> {to} is not supported on wgpu", where="op 'cast'")
    isz_in = 1 if src == "i8" else dt.ITEMSIZE[src]
    isz_out = 1 if to == "i8" else dt.ITEMSIZE[to]
    # elements per chunk: a multiple of 4 (whole words) and of the alignment, so output windows of a
    # packed i8 tensor start on word boundaries
    step = max(4, (be.binding_limit - 2 * be.offset_align) // max(isz_in, isz_out) // be.offset_align * be.offset_align)
    if to == "i8":
        xt = "u32" if src == "i8" else WGSL_TYPE[src]
        code = render("cast_i8", "to_i8", ENABLE=enable_f16(src), OT="u32", XT=xt,
                      CONVERT=snippet("cast_i8", f"convert.{src}"))
        key = f"cast_to_i8:{src}"
    else:
        code = render("cast_i8", "from_i8", ENABLE=enable_f16(to), OT=WGSL_TYPE[to], XT="u32",
                      WIDEN=snippet("cast_i8", f"widen.{to}"))
        key = f"cast_from_i8:{to}"
    s = 0
    while s < n:
        m = min(step, n - s)
        wx, xo = _win(x, s, m, isz_in, be)
        wo, oo = _win(out, s, m, isz_out, be)
        if to == "i8" and oo % 4:
            raise KernelError("an i8 output that does not start on a 4-byte boundary", where="op 'cast'")
        groups = ((m + 3) // 4 + 63) // 64 if to == "i8" else (m + 63) // 64
        be.launch(key, code, [wo, wx], struct.pack("<4I", m, xo, oo, 0), groups)
        s += m


def _win(s, start, m, isz, be):
    """Window over elements start .. start+m-1; i8 windows are in bytes (element offset = byte offset)."""
    w, off = window(s, 0, start, start + m - 1, isz, be.offset_align)
    return w, off


# ---- nf4_dequant (kernels/nf4.wgsl) ------------------------------------------------------------------
@launcher("nf4_dequant")
def nf4_dequant(be, v, ins, out):
    """Chunks of an even number of elements, so each chunk's codes start on a whole byte and every binding
    (output f32, codes, absmax) fits `be.binding_limit`."""
    codes, amax = ins
    n, block = math.prod(v.attrs["shape"]), int(v.attrs["block"])
    if n == 0:
        return
    table = ", ".join(repr(float(t)) if t else "0.0" for t in NF4_TABLE)
    code = render("nf4", TABLE=table)
    step = max(2, (be.binding_limit - 2 * be.offset_align) // 4 // 2 * 2)
    s = 0
    while s < n:
        m = min(step, n - s)
        wo, oo = window(out, 0, s, s + m - 1, 4, be.offset_align)
        wc, co = _win(codes, s // 2, (m + 1) // 2, 1, be)
        wa, ao = window(amax, 0, s // block, (s + m - 1) // block, 4, be.offset_align)
        be.launch("nf4_dequant", code, [wo, wc, wa], struct.pack("<8I", m, oo, co, ao, s, block, 0, 0),
                  (m + 63) // 64)
        s += m
