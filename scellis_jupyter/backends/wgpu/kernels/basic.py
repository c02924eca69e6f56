"""Baseline kernels: matmul, reduce_sum/max, softmax/log_softmax, gather, scatter_add.

Why: one thread per output with a fixed loop order is slow but deterministic (tier debug) and simple to
trust; the tiled families (matmul.py, reduce.py, ...) override these registrations as they land.
These do not split tensors larger than the binding limit: launch() refuses such bindings loudly.
"""
from __future__ import annotations

import math
import struct

from ..templates import WGSL_TYPE, enable_f16, render
from .registry import launcher
from .strided import broadcast_strides, contiguous_strides

WG = 64


def _go(be, name, body, storages, dtypes, params, n):
    decl = "\n".join(f"@group(0) @binding({i + 1}) var<storage, read_write> {nm}: array<{WGSL_TYPE[d]}>;"
                     for i, (nm, d) in enumerate(zip(["out", "x0", "x1", "x2"], dtypes)))
    src = render("basic", ENABLE=enable_f16(*dtypes), BINDINGS=decl, BODY=body)
    vals = list(params) + [0] * (16 - len(params))
    be.launch(f"basic-{name}:{body}:{dtypes}", src, storages, struct.pack("<16I", *vals), (n + WG - 1) // WG)


@launcher("matmul")
def _matmul(be, v, ins, out):
    a, b = ins
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = v.shape[:-2]
    nb = math.prod(batch)
    sa = broadcast_strides(a.shape[:-2], batch) if batch else ()
    sb = broadcast_strides(b.shape[:-2], batch) if batch else ()
    # per flat batch index: offsets computed on the host would need a table; use rank<=2 batch strides
    if len(batch) > 2:
        from ....errors import KernelError
        raise KernelError("the baseline matmul takes at most 2 batch dims", where="op 'matmul'")
    bshape = (list(batch) + [1, 1])[:2] if batch else [1, 1]
    sa2 = (list(sa) + [0, 0])[:2]
    sb2 = (list(sb) + [0, 0])[:2]
    body = f"""
  let total = p.a.x * p.a.y * p.a.w;
  if (i >= total) {{ return; }}
  let col = i % p.a.w; let row = (i / p.a.w) % p.a.x; let bi = i / (p.a.w * p.a.x);
  let b0 = bi / p.b.y; let b1 = bi % p.b.y;
  let oa = (b0 * p.c.x + b1 * p.c.y) * p.a.x * p.a.y + row * p.a.y;
  let ob = (b0 * p.c.z + b1 * p.c.w) * p.a.y * p.a.w + col;
  var acc = 0.0;
  for (var t = 0u; t < p.a.y; t = t + 1u) {{ acc = acc + f32(x0[oa + t]) * f32(x1[ob + t * p.a.w]); }}
  out[i] = {WGSL_TYPE[v.dtype]}(acc);"""
    sa_e, sb_e = sa2, sb2   # strides over the batch grid, in whole matrices
    _go(be, "matmul", body, [out, a, b], [v.dtype, a.dtype, b.dtype],
        [m, k, nb, n, bshape[0], bshape[1], 0, 0, sa_e[0], sa_e[1], sb_e[0], sb_e[1]], nb * m * n)


@launcher("reduce_sum", "reduce_max")
def _reduce(be, v, ins, out):
    (x,) = ins
    axes = tuple(v.attrs["axes"])
    shape = tuple(x.shape)
    # move reduced axes last (logically) by strides: outputs over kept dims, loop over reduced dims
    kept = [i for i in range(len(shape)) if i not in axes]
    st = contiguous_strides(shape)
    if len(kept) > 4 or len(axes) > 4:
        from ....errors import KernelError
        raise KernelError("the baseline reduction takes at most 4 kept and 4 reduced dims", where=f"op '{v.op}'")
    ks = ([shape[i] for i in kept] + [1] * 4)[:4]
    kst = ([st[i] for i in kept] + [0] * 4)[:4]
    rs = ([shape[i] for i in axes] + [1] * 4)[:4]
    rst = ([st[i] for i in axes] + [0] * 4)[:4]
    nout = math.prod(ks)
    ct = "f32" if v.dtype in ("f32", "f16") else "i32"
    init = {"reduce_sum": f"{ct}(0)", "reduce_max": "bitcast<f32>(0xff800000u)" if ct == "f32" else "-2147483647"}[v.op]
    upd = "acc = acc + e;" if v.op == "reduce_sum" else "if (e != e || e > acc) { acc = e; }"
    body = f"""
  if (i >= p.a.x) {{ return; }}
  var r = i; var base = 0u;
  let kd = array<u32, 4>(p.b.x, p.b.y, p.b.z, p.b.w);
  let kst = array<u32, 4>(p.c.x, p.c.y, p.c.z, p.c.w);
  for (var d = 3; d >= 0; d = d - 1) {{ let c = r % kd[d]; r = r / kd[d]; base = base + c * kst[d]; }}
  let rd = array<u32, 4>(p.d.x & 0xffffu, p.d.x >> 16u, p.d.y & 0xffffu, p.d.y >> 16u);
  let rst = array<u32, 4>(p.a.y, p.a.z, p.a.w, p.d.z);
  var acc = {init};
  for (var a0 = 0u; a0 < rd[0]; a0 = a0 + 1u) {{
  for (var a1 = 0u; a1 < rd[1]; a1 = a1 + 1u) {{
  for (var a2 = 0u; a2 < rd[2]; a2 = a2 + 1u) {{
  for (var a3 = 0u; a3 < rd[3]; a3 = a3 + 1u) {{
    let e = {ct}(x0[base + a0 * rst[0] + a1 * rst[1] + a2 * rst[2] + a3 * rst[3]]);
    {upd}
  }}}}}}}}
  out[i] = {WGSL_TYPE[v.dtype]}(acc);"""
    if max(rs) >= 65536:
        from ....errors import KernelError
        raise KernelError("the baseline reduction takes reduced dims below 65536", where=f"op '{v.op}'")
    _go(be, v.op, body, [out, x], [v.dtype, x.dtype],
        [nout, rst[0], rst[1], rst[2], *ks, *kst, rs[0] | (rs[1] << 16), rs[2] | (rs[3] << 16), rst[3], 0], nout)


@launcher("softmax", "log_softmax")
def _softmax(be, v, ins, out):
    (x,) = ins
    ax = v.attrs["axis"]
    shape = x.shape
    r = shape[ax]
    inner = math.prod(shape[ax + 1:])
    nrows = math.prod(shape) // max(r, 1) if r else 0
    last = "e - m - log(s)" if v.op == "log_softmax" else "exp(e - m) / s"
    body = f"""
  if (i >= p.a.x) {{ return; }}
  let o = (i / p.a.z) * p.a.y * p.a.z + (i % p.a.z);
  var m = bitcast<f32>(0xff800000u);
  for (var t = 0u; t < p.a.y; t = t + 1u) {{ m = max(m, f32(x0[o + t * p.a.z])); }}
  var s = 0.0;
  for (var t = 0u; t < p.a.y; t = t + 1u) {{ s = s + exp(f32(x0[o + t * p.a.z]) - m); }}
  for (var t = 0u; t < p.a.y; t = t + 1u) {{ let e = f32(x0[o + t * p.a.z]); out[o + t * p.a.z] = {WGSL_TYPE[v.dtype]}({last}); }}"""
    _go(be, v.op, body, [out, x], [v.dtype, x.dtype], [nrows, r, inner, 0], nrows)


def _axis_form(shape, ax):
    return math.prod(shape[:ax]), shape[ax], math.prod(shape[ax + 1:])


@launcher("gather")
def _gather(be, v, ins, out):
    x, idx = ins
    ax = v.attrs["axis"]
    ist = contiguous_strides(idx.shape)
    xst = contiguous_strides(x.shape)
    nd = len(idx.shape)
    if nd > 4:
        from ....errors import KernelError
        raise KernelError("the baseline gather takes rank <= 4", where="op 'gather'")
    ishape = ([1] * (4 - nd)) + list(idx.shape)
    xs = ([0] * (4 - nd)) + list(xst)
    axp = ax + (4 - nd)
    body = f"""
  let n = p.a.x * p.a.y * p.a.z * p.a.w;
  if (i >= n) {{ return; }}
  let dims = array<u32, 4>(p.a.x, p.a.y, p.a.z, p.a.w);
  let xst = array<u32, 4>(p.b.x, p.b.y, p.b.z, p.b.w);
  var r = i; var off = 0u;
  let j = u32(clamp(x1[i], 0, i32(p.c.y) - 1));
  for (var d = 3; d >= 0; d = d - 1) {{
    let c = r % dims[d]; r = r / dims[d];
    off = off + select(c, j, u32(d) == p.c.x) * xst[d];
  }}
  out[i] = x0[off];"""
    _go(be, "gather", body, [out, x, idx], [v.dtype, x.dtype, "i32"],
        [*ishape, *xs, axp, x.shape[ax], 0, 0], math.prod(idx.shape))


@launcher("scatter_add")
def _scatter_add(be, v, ins, out):
    base, idx, src = ins
    ax = v.attrs["axis"]
    nd = len(base.shape)
    if nd > 4 or any(idx.shape[k] != base.shape[k] for k in range(nd) if k != ax):
        from ....errors import KernelError
        raise KernelError("the baseline scatter_add needs rank <= 4 and index matching base off the axis",
                          where="op 'scatter_add'")
    outer, size, inner = _axis_form(base.shape, ax)
    n_idx = idx.shape[ax]
    ct = "f32" if v.dtype in ("f32", "f16") else "i32"
    body = f"""
  let n = p.a.x * p.a.y * p.a.z;
  if (i >= n) {{ return; }}
  let inner = i % p.a.z; let pos = (i / p.a.z) % p.a.y; let o = i / (p.a.z * p.a.y);
  var acc = {ct}(x0[i]);
  for (var t = 0u; t < p.a.w; t = t + 1u) {{
    let s = (o * p.a.w + t) * p.a.z + inner;
    if (u32(x1[s]) == pos) {{ acc = acc + {ct}(x2[s]); }}
  }}
  out[i] = {WGSL_TYPE[v.dtype]}(acc);"""
    _go(be, "scatter_add", body, [out, base, idx, src], [v.dtype, base.dtype, "i32", src.dtype],
        [outer, size, inner, n_idx], outer * size * inner)
