"""Casts to and from i8 (called by elementwise._cast); i8 is stored packed, 4 per u32 word.

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
from ..templates import WGSL_TYPE, enable_f16, render
from .registry import launcher
from .strided import window

HEAD = """{enable}
struct Params {{ n: u32, in_base: u32, out_base: u32, _p: u32 }}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<{ot}>;
@group(0) @binding(2) var<storage, read_write> x: array<{xt}>;
"""

TO_I8 = HEAD + """
fn to_i8(e: u32) -> u32 {{
  let a = x[p.in_base + e];
  {conv}
}}
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
  let j = gid.x + gid.y * nwg.x * 64u;     // output word (relative to this chunk)
  if (j * 4u >= p.n) {{ return; }}
  var w = 0u;
  for (var l = 0u; l < 4u; l = l + 1u) {{
    let e = j * 4u + l;
    if (e < p.n) {{ w = w | ((to_i8(e) & 0xffu) << (8u * l)); }}
  }}
  out[p.out_base / 4u + j] = w;
}}
"""

FROM_I8 = HEAD + """
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
  let i = gid.x + gid.y * nwg.x * 64u;
  if (i >= p.n) {{ return; }}
  let b = p.in_base + i;                   // byte index in the binding
  let word = x[b / 4u];
  let v = bitcast<i32>(word << (24u - 8u * (b % 4u))) >> 24u;
  out[p.out_base + i] = {store};
}}
"""

CONV_TO = {
    "f32": "if ((bitcast<u32>(a) & 0x7fffffffu) > 0x7f800000u) { return 0u; }\n  return bitcast<u32>(i32(clamp(trunc(a), -128.0, 127.0)));",
    "f16": "let f = f32(a);\n  if ((bitcast<u32>(f) & 0x7fffffffu) > 0x7f800000u) { return 0u; }\n  return bitcast<u32>(i32(clamp(trunc(f), -128.0, 127.0)));",
    "i32": "return bitcast<u32>(a);",
    "u32": "return a;",
    "bool": "return select(0u, 1u, a != 0u);",
    "i8": "return (x[(p.in_base + e) / 4u] >> (8u * ((p.in_base + e) % 4u)));",
}
STORE_FROM = {"f32": "f32(v)", "f16": "f16(f32(v))", "i32": "v", "u32": "bitcast<u32>(v)",
              "bool": "select(0u, 1u, v != 0)"}


def cast_i8(be, v, x, out):
    src, to = x.dtype, v.dtype
    n = math.prod(v.shape)
    if n == 0:
        return
    if src == "i8" and to == "i8":
        conv_to = CONV_TO["i8"]
    elif to == "i8":
        if src not in CONV_TO:
            raise DTypeError(f"cast {src} -> i8 is not supported on wgpu", where="op 'cast'")
        conv_to = CONV_TO[src]
    elif to not in STORE_FROM:
        raise DTypeError(f"cast i8 -> {to} is not supported on wgpu", where="op 'cast'")
    isz_in = 1 if src == "i8" else dt.ITEMSIZE[src]
    isz_out = 1 if to == "i8" else dt.ITEMSIZE[to]
    # elements per chunk: a multiple of 4 (whole words) and of the alignment, so output windows of a
    # packed i8 tensor start on word boundaries
    step = max(4, (be.binding_limit - 2 * be.offset_align) // max(isz_in, isz_out) // be.offset_align * be.offset_align)
    if to == "i8":
        xt = "u32" if src == "i8" else WGSL_TYPE[src]
        code = TO_I8.format(enable=enable_f16(src), ot="u32", xt=xt, conv=conv_to)
        key = f"cast_to_i8:{src}"
    else:
        code = FROM_I8.format(enable=enable_f16(to), ot=WGSL_TYPE[to], xt="u32", store=STORE_FROM[to])
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
    from ....graph.opset import NF4_TABLE
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
