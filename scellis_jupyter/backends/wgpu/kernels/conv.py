"""unfold (im2col) and fold (col2im) on kernels/conv.wgsl: one thread per output element, fixed order.

unfold follows torch.nn.functional.unfold ([N, C*kh*kw, L], padding filled with attrs['pad_value']).
fold sums the patches covering each pixel in a fixed (ki, kj) order, so conv/pool gradients are
deterministic without atomics (f16 accumulates in f32, rounds once). Splitting: the output is written in
flat chunks that fit the binding limit; the input is bound whole and must fit it (KernelError otherwise).
"""
from __future__ import annotations

import math
import struct

from ....errors import KernelError
from ....graph.opset import conv_out
from ..templates import WGSL_TYPE, enable_f16, render, snippet
from .registry import launcher
from .reduce import pack_words
from .strided import window


def _geom(v, n, c, h, w):
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = (v.attrs[k] for k in ("kernel", "stride", "padding", "dilation"))
    oh, ow = conv_out(h, kh, sh, ph, dh), conv_out(w, kw, sw, pw, dw)
    return [n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow]


def _run(be, name, body, v, x, out, g, pad_bits):
    od, xd = v.dtype, x.dtype
    total = math.prod(v.shape)
    if total == 0:
        return
    if (max(x.nbytes, 4) + 3) // 4 * 4 > be.binding_limit:
        raise KernelError(f"the {name} input of {x.nbytes} bytes exceeds the binding limit {be.binding_limit}",
                          where=f"op '{name}'", hint="use a smaller batch")
    src = render("conv", ENABLE=enable_f16(od, xd), OT=WGSL_TYPE[od], XT=WGSL_TYPE[xd], BODY=body)
    isz = 2 if od == "f16" else 4
    wx = x
    step = max(1, (be.binding_limit - be.offset_align) // isz)
    for s in range(0, total, step):
        m = min(step, total - s)
        wo, oo = window(out, 0, s, s + m - 1, isz, be.offset_align)
        be.launch(f"{name}:{od}:{xd}", src, [wo, wx],
                  pack_words(g + [pad_bits, m, s, oo, 0], 20), (m + 63) // 64)


@launcher("unfold")
def _unfold(be, v, ins, out):
    (x,) = ins
    g = _geom(v, *x.shape)
    pad = struct.unpack("<I", struct.pack("<f", float(v.attrs.get("pad_value", 0.0))))[0]
    body = snippet("conv", "unfold", OT=WGSL_TYPE[v.dtype])
    _run(be, "unfold", body, v, x, out, g, pad)


@launcher("fold")
def _fold(be, v, ins, out):
    (cols,) = ins
    n, c, h, w = v.shape
    ct = "f32" if v.dtype in ("f32", "f16") else "i32"
    body = snippet("conv", "fold", CT=ct, OT=WGSL_TYPE[v.dtype])
    _run(be, "fold", body, v, cols, out, _geom(v, n, c, h, w), 0)
