"""unfold (im2col) and fold (col2im) on the baseline template: one thread per output, fixed order.

fold sums the patches covering each pixel in a fixed (ki, kj) order, so conv/pool gradients are
deterministic without atomics.
"""
from __future__ import annotations

import math
import struct

from ....graph.opset import conv_out
from ..templates import WGSL_TYPE, enable_f16, render
from . import launcher


def _geom(v, n, c, h, w):
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = (v.attrs[k] for k in ("kernel", "stride", "padding", "dilation"))
    oh, ow = conv_out(h, kh, sh, ph, dh), conv_out(w, kw, sw, pw, dw)
    return [n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow]


HEAD = """
  let n_ = p.a.x; let c_ = p.a.y; let h_ = p.a.z; let w_ = p.a.w;
  let kh = p.b.x; let kw = p.b.y; let sh = p.b.z; let sw = p.b.w;
  let ph = p.c.x; let pw = p.c.y; let dh = p.c.z; let dw = p.c.w;
  let oh = p.d.x; let ow = p.d.y;"""


@launcher("unfold")
def _unfold(be, v, ins, out):
    (x,) = ins
    g = _geom(v, *x.shape)
    total = math.prod(v.shape)
    body = HEAD + f"""
  if (i >= n_ * c_ * kh * kw * oh * ow) {{ return; }}
  let oj = i % ow; let oi = (i / ow) % oh; let kj = (i / (ow * oh)) % kw; let ki = (i / (ow * oh * kw)) % kh;
  let c = (i / (ow * oh * kw * kh)) % c_; let n = i / (ow * oh * kw * kh * c_);
  let y = i32(oi * sh + ki * dh) - i32(ph); let z = i32(oj * sw + kj * dw) - i32(pw);
  if (y < 0 || z < 0 || y >= i32(h_) || z >= i32(w_)) {{ out[i] = {WGSL_TYPE[v.dtype]}(bitcast<f32>(p.d.z)); return; }}
  out[i] = x0[((n * c_ + c) * h_ + u32(y)) * w_ + u32(z)];"""
    pad = struct.unpack("<I", struct.pack("<f", float(v.attrs.get("pad_value", 0.0))))[0]
    # the pad value travels as raw bits in p.d.z (word 14 of 16)
    t = WGSL_TYPE[out.dtype]
    decl = (f"@group(0) @binding(1) var<storage, read_write> out: array<{t}>;\n"
            f"@group(0) @binding(2) var<storage, read_write> x0: array<{WGSL_TYPE[x.dtype]}>;")
    src = render("basic", ENABLE=enable_f16(out.dtype, x.dtype), BINDINGS=decl, BODY=body)
    be.launch(f"unfold:{out.dtype}", src, [out, x], struct.pack("<16I", *g, pad, 0), (total + 63) // 64)


@launcher("fold")
def _fold(be, v, ins, out):
    (cols,) = ins
    n, c, h, w = v.shape
    g = _geom(v, n, c, h, w)
    total = n * c * h * w
    ct = "f32" if v.dtype in ("f32", "f16") else "i32"
    body = HEAD + f"""
  if (i >= n_ * c_ * h_ * w_) {{ return; }}
  let z = i % w_; let y = (i / w_) % h_; let c = (i / (w_ * h_)) % c_; let n = i / (w_ * h_ * c_);
  var acc = {ct}(0);
  for (var ki = 0u; ki < kh; ki = ki + 1u) {{
    let ty = i32(y + ph) - i32(ki * dh);
    if (ty < 0 || ty % i32(sh) != 0 || u32(ty) / sh >= oh) {{ continue; }}
    for (var kj = 0u; kj < kw; kj = kj + 1u) {{
      let tz = i32(z + pw) - i32(kj * dw);
      if (tz < 0 || tz % i32(sw) != 0 || u32(tz) / sw >= ow) {{ continue; }}
      let row = (c * kh + ki) * kw + kj;
      acc = acc + {ct}(x0[(n * c_ * kh * kw + row) * oh * ow + (u32(ty) / sh) * ow + u32(tz) / sw]);
    }}
  }}
  out[i] = {WGSL_TYPE[v.dtype]}(acc);"""
    t = WGSL_TYPE[out.dtype]
    decl = (f"@group(0) @binding(1) var<storage, read_write> out: array<{t}>;\n"
            f"@group(0) @binding(2) var<storage, read_write> x0: array<{WGSL_TYPE[cols.dtype]}>;")
    src = render("basic", ENABLE=enable_f16(out.dtype, cols.dtype), BINDINGS=decl, BODY=body)
    be.launch(f"fold:{out.dtype}", src, [out, cols], struct.pack("<16I", *g, 0, 0), (total + 63) // 64)
