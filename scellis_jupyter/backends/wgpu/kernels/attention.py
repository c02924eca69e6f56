"""Attention on wgpu: forward (out, lse) and backward (dq, dk, dv); flash kernels without any Lq x Lk buffer.

Sequences up to 16384 keys (f32 or f16, with or without dropout) take the materialized-score path of
attention_scores.py instead (batched matmuls and row kernels over chunks of heads), which is faster there;
everything below is the flash path.

Why this shape: the score matrix is what makes naive attention run out of memory and out of binding
size on long sequences, so every kernel recomputes scores blockwise from q, k (and lse in the
backward) with key/query blocks staged in workgroup memory. Leading dims are flattened into
heads (BH). A chunk of heads (or of query rows of one head) is dispatched per launch so every binding
fits `binding_limit`; k and v of one head must fit. The backward is three deterministic kernels in
fixed order, no atomics: stats (lse, delta) into the dq region, then dk/dv (per key block, loop over
query blocks), then dq (per query block, loop over key blocks) which overwrites the stats.

Two kernel families: for head sizes up to 64 the register-tiled flash kernels (kernels/flash_fwd.wgsl,
flash_bwd.wgsl: 4 rows x 16 CK keys per thread in named vec4s, tiles sized from the adapter's
workgroup memory, vec4 loads when rows and offsets are 4-aligned, the next tile prefetched into
registers), which also carry attention dropout; above that the one-row-per-thread kernels of
attention_fwd.wgsl / attention_bwd.wgsl. SCELLIS_ATTENTION_KERNEL=rowwise forces the latter and
SCELLIS_ATTENTION_TILE_{FWD,DQ,DKDV}=TYxCK a tile shape (benchmarking).
"""
from __future__ import annotations

import math
import struct

import numpy as np

from .... import dtypes as dt, settings
from ....errors import KernelError
from ...storage import Storage
from ....program.schedule import multi_offset
from ..templates import WGSL_TYPE, enable_f16, render
from .registry import launcher
from .strided import broadcast_strides, collapse, contiguous_strides, window
from .elementwise import fill
from . import flash_sgm, matmul_sgm
from .attention_scores import Drop, cast_into, f32_scratch, heads_per_chunk, scores_bwd, scores_fwd, widened

BQ = 32            # threads per workgroup = rows (query rows, or key rows in dk/dv) owned by it
MAX_HEAD = 256     # head sizes above this would need too much private memory per thread
NEG_INF = 0xFF800000


def _blk(be, per_row_floats: int) -> int:
    lim = int(be.limits.get("max-compute-workgroup-storage-size", 16384))
    for b in (32, 16, 8, 4, 2, 1):
        if b * max(per_row_floats, 1) * 4 <= lim:
            return b
    raise KernelError(f"head sizes need {per_row_floats * 4} bytes of workgroup memory per row, over {lim}",
                      where="op 'attention'")


class _Mask:
    """Broadcast strides of the bool mask over (heads, Lq, Lk); heads as a collapsed batch box (rank <= 4)."""

    def __init__(self, m: Storage, batch: tuple, lq: int, lk: int):
        full = tuple(batch) + (lq, lk)
        st = broadcast_strides(m.shape, full)
        self.sq, self.sk = st[-2], st[-1]
        bst = st[:len(batch)]
        cshape, (_, cst) = collapse(tuple(batch), [contiguous_strides(batch), bst]) if batch else ((1,), [(0,), (0,)])
        if len(cshape) > 4:
            raise KernelError(f"the mask broadcasts over {len(cshape)} separate batch dims (at most 4)",
                              where="op 'attention'", hint="expand the mask to the full batch shape")
        self.shape, self.strides, self.m, self.lk = tuple(cshape), tuple(cst), m, lk
        bh = math.prod(batch) if batch else 1
        coords = np.unravel_index(np.arange(bh, dtype=np.int64), self.shape)
        self.base = sum(c * s for c, s in zip(coords, self.strides)).astype(np.int64)

    def footprint(self, b0, b1, r0, r1) -> tuple[int, int]:
        bs = self.base[b0:b1]
        lo = int(bs.min()) + r0 * self.sq
        hi = int(bs.max()) + (r1 - 1) * self.sq + (self.lk - 1) * self.sk
        return lo, hi

    def params(self, woff: int, lo: int) -> tuple:
        shp = list(self.shape) + [1] * (4 - len(self.shape))
        st = list(self.strides) + [0] * (4 - len(self.strides))
        return (woff - lo) % (1 << 32), self.sq, self.sk, len(self.shape), shp, st


def _plan(be, bh, lq, row_bytes, head_bytes, mask, blk):
    """Chunks (b0, b1, r0, r1) over heads x query rows so every binding of every kernel fits."""
    lim, a = be.binding_limit, be.offset_align

    def fits(b0, b1, r0, r1):
        nb, nr = b1 - b0, r1 - r0
        if any(nb * nr * rb + a > lim for rb in row_bytes):
            return False
        if any(nb * hb + a > lim for hb in head_bytes):
            return False
        if mask is not None:
            lo, hi = mask.footprint(b0, b1, r0, r1)
            if (hi - lo + 1) * 4 + a > lim:
                return False
        return True

    nb = bh
    while nb >= 1:
        chunks = [(b, min(b + nb, bh), 0, lq) for b in range(0, bh, nb)]
        if all(fits(*c) for c in chunks):
            return chunks
        if nb == 1:
            break
        nb = (nb + 1) // 2
    if any(hb + a > lim for hb in head_bytes):
        raise KernelError(f"k/v of one head ({max(head_bytes)} bytes) exceed the binding limit {lim}",
                          where="op 'attention'", hint="shorten the key sequence or split heads")
    nr = -(-((lq + 1) // 2) // blk) * blk
    while nr >= blk:
        chunks = [(b, b + 1, r, min(r + nr, lq)) for b in range(bh) for r in range(0, lq, nr)]
        if all(fits(*c) for c in chunks):
            return chunks
        if nr == blk:
            break
        nr = max(blk, -(-(nr // 2) // blk) * blk)
    raise KernelError(f"{blk} query rows of one head do not fit the binding limit {lim}", where="op 'attention'")


def _rows(s: Storage, isz, re, L, b0, b1, r0, r1, align):
    """Window over rows r0..r1 of heads b0..b1 of a [BH, L, re] tensor; rows must be full if b1 - b0 > 1."""
    if b1 <= b0 or r1 <= r0 or re == 0:
        return Storage(s.backend, s.buffer, s.offset, s.shape, s.dtype, 0), 0
    lo = (b0 * L + r0) * re
    hi = ((b1 - 1) * L + r1) * re - 1
    return window(s, 0, lo, hi, isz, align)


def _render(name: str, section: str | None, mask: bool, subs: dict, k2: bool = False,
            vec: bool = False, drop: tuple = (False, False, False)) -> tuple[str, str]:
    """(pipeline key, source) of one attention kernel; the shared pieces come from kernels/attention.wgsl.
    drop: (dropout on, stream position bound, 64-bit multiplies)."""
    on, based, i64 = drop
    flags = {"MASK": mask, "K2": k2, "VEC": vec, "DROP": on, "BASED": based, "INT64": i64}
    src = render(name, section, flags=flags, **subs)
    key = (f"{name}:{section}:mask={mask}:k2={k2}:vec={vec}:drop={on}:based={based}:i64={i64}:"
           + ":".join(f"{k}={v}" for k, v in sorted(subs.items())))
    return key, src


def _extras(v, ins, n: int):
    """(mask, stream position) storages among the inputs after the first n (either may be absent)."""
    based = bool(v.attrs.get("based"))
    rest = list(ins[n:])
    sbase = rest.pop() if based else None
    return (rest[0] if rest else None), sbase


def _dropout(be, v, flash: bool, nbind: int) -> tuple[tuple, bytes]:
    """((DROP, BASED, INT64) flags, the params tail: word offset lo/hi, Philox key, (p, 1 / (1 - p)))."""
    p = float(v.attrs.get("dropout", 0.0))
    tail = struct.pack("<4I4f", 0, 0, 0, 0, 0.0, 1.0, 0.0, 0.0)
    if not p:
        return (False, False, False), tail
    if not flash:
        raise KernelError(f"attention dropout runs in the flash kernels only (head sizes up to {FLASH_HEAD} and "
                          f"enough workgroup memory)", where=f"op {v.op!r}", hint="use dropout=0 or smaller heads")
    lim = int(be.limits.get("max-storage-buffers-per-shader-stage", 8))
    if nbind > lim:
        raise KernelError(f"attention dropout needs {nbind} storage bindings, the adapter allows {lim}",
                          where=f"op {v.op!r}")
    off = int(v.attrs["offset"])
    k0, k1 = (int(x) & 0xFFFFFFFF for x in v.attrs["key"])
    tail = struct.pack("<4I4f", off & 0xFFFFFFFF, (off >> 32) & 0xFFFFFFFF, k0, k1, p, 1.0 / (1.0 - p), 0.0, 0.0)
    return (True, bool(v.attrs.get("based")), bool(be.int64)), tail



# Register-tiled kernels (kernels/flash_fwd.wgsl, flash_bwd.wgsl): head sizes up to FLASH_HEAD, tile
# shapes (TY thread rows, CK key slots per thread) taken in this order, the first whose workgroup memory
# fits the adapter's limit (48 KiB on the H200 takes the first; llvmpipe's 32 KiB a smaller one).
FLASH_HEAD = 64
FLASH_TILES = {"fwd": ((16, 2), (8, 2), (8, 1), (4, 1)),
               "dq": ((16, 1), (8, 2), (8, 1), (4, 1)),
               "dkdv": ((8, 2), (8, 1), (4, 1))}
LOG2E = 1.4426950408889634


def flash_smem(kind: str, ty: int, ck: int) -> int:
    """Workgroup-memory bytes of one flash kernel (vec4 tiles; see the arrays in the .wgsl files)."""
    rq, bk = 4 * ty, 16 * ck
    if kind == "fwd":
        vec4s = rq * 17 + bk * 17 + bk * 16 + bk * (ty + 1) + 16 * ty
        return 16 * vec4s
    if kind == "dq":
        return 16 * (2 * rq * 17 + 2 * bk * 17 + bk * (ty + 1)) + 8 * rq
    return 16 * (2 * rq * 17 + 2 * bk * 17 + 2 * bk * (ty + 1)) + 8 * bk


def _forced_tile(kind: str) -> tuple[int, int] | None:
    """SCELLIS_ATTENTION_TILE_{FWD,DQ,DKDV}=TYxCK: one tile for that kernel, to measure it (tried like a
    table entry: a tile that does not fit the adapter falls back to the one-row-per-thread kernel)."""
    name = f"SCELLIS_ATTENTION_TILE_{kind.upper()}"
    v = settings.text(name)
    if v is None:
        return None
    ty, x, ck = v.lower().partition("x")
    if not (x and ty.isdigit() and ck.isdigit() and int(ty) > 0 and int(ck) > 0):
        raise settings.refuse(name, v, "a tile TYxCK", hint=f"e.g. {'x'.join(map(str, FLASH_TILES[kind][0]))}")
    return int(ty), int(ck)


def _flash_cfg(be, kind: str, d: int, dv: int):
    """(TY, CK) of the register-tiled kernel, or None (head too large, or too little workgroup memory:
    the one-row-per-thread kernels of attention_fwd/attention_bwd.wgsl run instead)."""
    if max(d, dv) > FLASH_HEAD or settings.choice("SCELLIS_ATTENTION_KERNEL") == "rowwise":
        return None
    lim = int(be.limits.get("max-compute-workgroup-storage-size", 16384))
    inv = int(be.limits.get("max-compute-invocations-per-workgroup", 256))
    forced = _forced_tile(kind)
    cands = [forced] if forced else FLASH_TILES[kind]
    for ty, ck in cands:
        # the kernels stage 1, 2 or 4 vec4 slots per thread (16 CK / TY of them)
        if flash_smem(kind, ty, ck) <= lim and 16 * ty <= inv and (16 * ck) % ty == 0 and 16 * ck // ty <= 4:
            return ty, ck
    return None


def _common(v, ins):
    q, k, val = ins[:3]
    batch = tuple(q.shape[:-2])
    lq, d = q.shape[-2], q.shape[-1]
    lk, dv = k.shape[-2], val.shape[-1]
    if d > MAX_HEAD or dv > MAX_HEAD:
        raise KernelError(f"head sizes {d}/{dv} exceed {MAX_HEAD} on wgpu", where="op 'attention'")
    t = q.dtype
    for s in ins[:3]:
        if s.dtype != t:
            raise KernelError(f"q, k, v must share a dtype, got {q.dtype}/{k.dtype}/{val.dtype}",
                              where="op 'attention'")
    bh = math.prod(batch) if batch else 1
    return batch, bh, lq, lk, d, dv, t


@launcher("attention")
def _attention(be, v, ins, out):
    batch, bh, lq, lk, d, dv, t = _common(v, ins)
    q, k, val = ins[:3]
    causal = bool(v.attrs["causal"])
    mraw, sbase = _extras(v, ins, 3)
    mask = _Mask(mraw, batch, lq, lk) if mraw is not None else None
    (oshape, lshape), (odt, ldt) = v.shape, v.dtype
    o = out.sub(0, oshape, odt, dt.nbytes(oshape, odt))
    lse = out.sub(multi_offset(v.shape, v.dtype, 1), lshape, ldt, dt.nbytes(lshape, ldt))
    if bh == 0 or lq == 0:
        return
    isz = dt.ITEMSIZE[t]
    scale = float(v.attrs["scale"])
    sg = _sgm_plans(be, v, t, d, dv, mask, ("fwd",), (q, k, val, o))
    chunk = None if sg else heads_per_chunk(be, v, t, bh, lq, lk, d, dv, mask)
    if chunk is not None:
        half = on_matrix_units(be, t)
        if t == "f16":          # computed in f32 (or on the matrix units from f16 operands), rounded once
            if not half:
                q, k, val = (widened(be, f"attention-f32-{n}", s) for n, s in (("q", q), ("k", k), ("v", val)))
            o16, o = o, f32_scratch(be, "attention-f32-o", o.shape)
        scores_fwd(be, q, k, val, o, lse, mask, causal, scale, (bh, lq, lk, d, dv), chunk,
                   Drop.of(v, sbase, be.int64), half=half)
        if t == "f16":
            cast_into(be, o, o16)
        return
    cfg = None if sg else _flash_cfg(be, "fwd", d, dv)
    drop, dtail = _dropout(be, v, cfg is not None, 5 + (mask is not None) + (sbase is not None))
    if sg:
        rows_per, pscale = sg["fwd"].br, scale * LOG2E

        def kernel(vec):
            return flash_sgm.key(sg["fwd"], causal), flash_sgm.source(sg["fwd"], causal)
    elif cfg is not None:
        ty, ck = cfg
        rows_per = 4 * ty
        def kernel(vec):
            return _render("flash_fwd", None, mask is not None, dict(
                ENABLE=enable_f16(t), T=WGSL_TYPE[t], D=d, DV=dv, TY=ty, CK=ck, NT=16 * ty,
                CAUSAL=str(causal).lower(), MASKED=str(mask is not None).lower(), MASK_BINDING=6,
                BASE_BINDING=6 + (mask is not None)), k2=ck == 2, vec=vec, drop=drop)
        pscale = scale * LOG2E
    else:
        rows_per = BQ
        bk = _blk(be, d + dv)
        rowwise = _render("attention_fwd", None, mask is not None, dict(
            ENABLE=enable_f16(t), T=WGSL_TYPE[t], D=d, DV=dv, BQ=BQ, BK=bk, CAUSAL=str(causal).lower(),
            MASK_BINDING=6, KS=max(bk * d, 1), VS=max(bk * dv, 1)))

        def kernel(vec):
            return rowwise
        pscale = scale
    al = be.offset_align
    chunks = _plan(be, bh, lq, [d * isz, dv * isz, 4], [lk * d * isz, lk * dv * isz], mask, 64)
    for b0, b1, r0, r1 in chunks:
        nb, nr = b1 - b0, r1 - r0
        wq, qo = _rows(q, isz, d, lq, b0, b1, r0, r1, al)
        wk, ko = _rows(k, isz, d, lk, b0, b1, 0, lk, al)
        wv, vo = _rows(val, isz, dv, lk, b0, b1, 0, lk, al)
        wo, oo = _rows(o, isz, dv, lq, b0, b1, r0, r1, al)
        wl, lo_ = _rows(lse, 4, 1, lq, b0, b1, r0, r1, al)
        storages = [wq, wk, wv, wo, wl]
        mparams = (0, 0, 0, 0, [1, 1, 1, 1], [0, 0, 0, 0])
        if mask is not None:
            mlo, mhi = mask.footprint(b0, b1, r0, r1)
            wm, mo = window(mask.m, 0, mlo, mhi, 4, al)
            storages.append(wm)
            mparams = mask.params(mo, mlo)
        if drop[1]:
            storages.append(sbase)
        moff, msq, msk, mrank, mshape, mstride = mparams
        nqb = -(-nr // rows_per)
        params = struct.pack("<IIIIIIiIfIIIIIIIIIII4I4I", nb, lq, lk, nr, r0, nqb, lk - lq, NEG_INF,
                             pscale, qo, ko, vo, oo, lo_, moff, b0, msq, msk, mrank, 0,
                             *mshape, *mstride) + dtail
        key, src = kernel(cfg is not None and d % 4 == 0 and dv % 4 == 0 and (qo | ko | vo | oo) % 4 == 0)
        be.launch(key, src, storages, params, nb * nqb)


def _sgm_plans(be, v, t: str, d: int, dv: int, mask, kinds: tuple, operands) -> dict | None:
    """The flash_sgm plans of `kinds` where the matrix-unit flash kernels run this attention, else None: asked for
    (SCELLIS_ATTENTION_KERNEL=sgm: opt-in until they are checked on a GPU with matrix units; no GPU was lent since
    they were written), f16 (or an f32 configuration's f32) operands on a device with matrix units under the
    program's tier, head sizes in whole fragments, no bool mask, no dropout, every operand 16-byte-row aligned
    (vec4 bindings), and not SCELLIS_ATTENTION_PATH=scores."""
    if (settings.choice("SCELLIS_ATTENTION_KERNEL") != "sgm" or mask is not None or float(v.attrs.get("dropout", 0.0))
            or settings.choice("SCELLIS_ATTENTION_PATH") == "scores"):
        return None
    isz = dt.ITEMSIZE[t]
    if any(s.dtype != t or s.offset % (4 * isz) for s in operands):
        return None
    plans = {kd: flash_sgm.plan(be, kd, t, d, dv, getattr(be, "tier", None)) for kd in kinds}
    return plans if all(plans.values()) else None


def on_matrix_units(be, t: str) -> bool:
    """Whether the score path's products of `t` operands run on the matrix units (kernels/matmul_sgm.py): f16
    where the device offers an f16 configuration under the program's tier (never debug). They then take the f16
    operands as they are, into f32 scores, instead of widened f32 copies on the ordinary ALUs."""
    return t == "f16" and matmul_sgm.config_for(be, "f16", getattr(be, "tier", None)) is not None


def _stats_storage(be, dq: Storage, n: int) -> Storage:
    """f32 (lse, delta) pairs for n query rows: inside the dq region when it is big enough, else a
    scratch buffer kept on the backend (only for head sizes under 8 bytes per row)."""
    need = n * 8
    if dq.nbytes >= need:
        return dq.sub(0, (n, 2), "f32", need)
    return Storage(be, be.scratch("attention-stats", need), 0, (n, 2), "f32", need)


@launcher("attention_bwd")
def _attention_bwd(be, v, ins, out):
    batch, bh, lq, lk, d, dv, t = _common(v, ins)
    q, k, val, o, lse, dout = ins[:6]
    causal = bool(v.attrs["causal"])
    mraw, sbase = _extras(v, ins, 6)
    mask = _Mask(mraw, batch, lq, lk) if mraw is not None else None
    shapes, dts = v.shape, v.dtype
    g = [out.sub(multi_offset(shapes, dts, i), shapes[i], dts[i], dt.nbytes(shapes[i], dts[i])) for i in range(3)]
    dq, dk, dvv = g
    if bh == 0:
        return
    isz, gsz, osz = dt.ITEMSIZE[t], dt.ITEMSIZE[dout.dtype], dt.ITEMSIZE[o.dtype]
    if o.dtype != t:
        raise KernelError(f"attention out dtype {o.dtype} differs from q's {t}", where="op 'attention_bwd'")
    if lq == 0:
        if lk:
            fill(be, dk, 0)
            fill(be, dvv, 0)
        return
    scale = float(v.attrs["scale"])
    sg = _sgm_plans(be, v, t, d, dv, mask, ("dq", "dkdv"), (q, k, val, o, dout, dq, dk, dvv))
    chunk = heads_per_chunk(be, v, t, bh, lq, lk, d, dv, mask) if dout.dtype == t and not sg else None
    if chunk is not None:
        g16, half = g, None
        if t == "f16" and on_matrix_units(be, t):    # f16 products on the matrix units; row kernels read f32
            half = tuple(widened(be, f"attention-f32-{n}", s) for n, s in (("o", o), ("dout", dout)))
            g = [f32_scratch(be, f"attention-f32-d{n}", s.shape) for n, s in zip(("q", "k", "v"), g16)]
        elif t == "f16":          # computed in f32, rounded once
            q, k, val, o, dout = (widened(be, f"attention-f32-{n}", s) for n, s in
                                  (("q", q), ("k", k), ("v", val), ("o", o), ("dout", dout)))
            g = [f32_scratch(be, f"attention-f32-d{n}", s.shape) for n, s in zip(("q", "k", "v"), g16)]
        scores_bwd(be, q, k, val, o, lse, dout, g, mask, causal, scale, (bh, lq, lk, d, dv), chunk,
                   Drop.of(v, sbase, be.int64), half=half)
        if t == "f16":
            for w, s in zip(g, g16):
                cast_into(be, w, s)
        return
    stats = _stats_storage(be, dq, bh * lq)
    bk_dq = _blk(be, d + dv)
    bk_kv = _blk(be, d + dv + 2)
    base = dict(ENABLE=enable_f16(t, dout.dtype), T=WGSL_TYPE[t], D=d, DV=dv, BQ=BQ,
                CAUSAL=str(causal).lower(), MASK_BINDING=8)
    # the dout binding's type: the same template placeholder T would be wrong if dout's dtype differs
    if dout.dtype != t:
        raise KernelError(f"attention gradient dtype {dout.dtype} differs from q's {t}", where="op 'attention_bwd'")
    has = mask is not None
    kst, sst = _render("attention_bwd", "stats", has, dict(base, BK=1))
    cdq, ckv = (None, None) if sg else (_flash_cfg(be, "dq", d, dv), _flash_cfg(be, "dkdv", d, dv))
    drop, dtail = _dropout(be, v, cdq is not None and ckv is not None, 7 + has + (sbase is not None))
    if sg:
        def kernels(vec):
            return tuple((flash_sgm.key(sg[kd], causal), flash_sgm.source(sg[kd], causal)) for kd in ("dq", "dkdv"))
        rows_dq, rows_kv, pscale = sg["dq"].br, sg["dkdv"].br, scale * LOG2E
    elif cdq is not None and ckv is not None:
        fb = dict(ENABLE=base["ENABLE"], T=base["T"], D=d, DV=dv, CAUSAL=base["CAUSAL"],
                  MASKED=str(has).lower(), MASK_BINDING=8, BASE_BINDING=8 + has)
        def kernels(vec):
            return (_render("flash_bwd", "dq", has, dict(fb, TY=cdq[0], CK=cdq[1], NT=16 * cdq[0]),
                            k2=cdq[1] == 2, vec=vec, drop=drop),
                    _render("flash_bwd", "dkdv", has, dict(fb, TY=ckv[0], CK=ckv[1], NT=16 * ckv[0]),
                            k2=ckv[1] == 2, vec=vec, drop=drop))
        rows_dq, rows_kv, pscale = 4 * cdq[0], 4 * ckv[0], scale * LOG2E
    else:
        rowwise = (_render("attention_bwd", "dq", has, dict(base, BK=bk_dq, KS=max(bk_dq * d, 1),
                                                            VS=max(bk_dq * dv, 1))),
                   _render("attention_bwd", "dkdv", has, dict(base, BK=bk_kv, QS=max(bk_kv * d, 1),
                                                              DS=max(bk_kv * dv, 1), SS=bk_kv * 2)))

        def kernels(vec):
            return rowwise
        rows_dq, rows_kv, pscale = BQ, BQ, scale
    al = be.offset_align
    chunks = _plan(be, bh, lq, [d * isz, dv * osz, 4, dv * gsz, d * isz, 8],
                   [lk * d * isz, lk * dv * isz] * 2, mask, 64)

    def wins(b0, b1, r0, r1):
        w = {}
        w["q"] = _rows(q, isz, d, lq, b0, b1, r0, r1, al)
        w["k"] = _rows(k, isz, d, lk, b0, b1, 0, lk, al)
        w["v"] = _rows(val, isz, dv, lk, b0, b1, 0, lk, al)
        w["o"] = _rows(o, osz, dv, lq, b0, b1, r0, r1, al)
        w["lse"] = _rows(lse, 4, 1, lq, b0, b1, r0, r1, al)
        w["dout"] = _rows(dout, gsz, dv, lq, b0, b1, r0, r1, al)
        w["dq"] = _rows(dq, isz, d, lq, b0, b1, r0, r1, al)
        w["dk"] = _rows(dk, isz, d, lk, b0, b1, 0, lk, al)
        w["dv"] = _rows(dvv, isz, dv, lk, b0, b1, 0, lk, al)
        w["st"] = _rows(stats, 4, 2, lq, b0, b1, r0, r1, al)
        mp = (0, 0, 0, 0, [1, 1, 1, 1], [0, 0, 0, 0])
        if mask is not None:
            mlo, mhi = mask.footprint(b0, b1, r0, r1)
            wm, mo = window(mask.m, 0, mlo, mhi, 4, al)
            w["m"] = (wm, 0)
            mp = mask.params(mo, mlo)
        return w, mp

    def params(b0, b1, r0, r1, nblk, accum, w, mp, goff, g2off):
        moff, msq, msk, mrank, mshape, mstride = mp
        return struct.pack("<IIIIIIiIfIIIIIIIIIIIIIIf4I4I", b1 - b0, lq, lk, r1 - r0, r0, nblk, lk - lq, accum,
                           pscale, w["q"][1], w["k"][1], w["v"][1], w["o"][1], w["lse"][1], w["dout"][1], goff,
                           g2off, w["st"][1], moff, b0, msq, msk, mrank, scale, *mshape, *mstride) + dtail

    ms = lambda w: ([w["m"][0]] if mask is not None else []) + ([sbase] if drop[1] else [])  # noqa: E731
    plan = [(c, wins(*c)) for c in chunks]
    # vec4 bindings when every row and window offset is 4-aligned (flash kernels only)
    vec = (cdq is not None and ckv is not None and d % 4 == 0 and dv % 4 == 0
           and all(w[n][1] % 4 == 0 for _, (w, _) in plan for n in ("q", "k", "v", "o", "dout", "dq", "dk", "dv")))
    (kdq, sdq), (kkv, skv) = kernels(vec)
    # 1. stats for every chunk (before any dq is written over them)
    for (b0, b1, r0, r1), (w, mp) in plan:
        n = (b1 - b0) * (r1 - r0)
        be.launch(kst, sst, [w["o"][0], w["lse"][0], w["dout"][0], w["st"][0]],
                  params(b0, b1, r0, r1, 0, 0, w, mp, 0, 0), -(-n // 64))
    # 2. dk, dv: chunks of one head over query rows accumulate in order
    if lk:
        seen: set = set()
        nkb = -(-lk // rows_kv)
        for (b0, b1, r0, r1), (w, mp) in plan:
            accum = 1 if (b0, b1) in seen else 0
            seen.add((b0, b1))
            be.launch(kkv, skv, [w["q"][0], w["k"][0], w["v"][0], w["st"][0], w["dout"][0], w["dk"][0],
                                 w["dv"][0]] + ms(w),
                      params(b0, b1, r0, r1, nkb, accum, w, mp, w["dk"][1], w["dv"][1]), (b1 - b0) * nkb)
    # 3. dq (overwrites the stats)
    for (b0, b1, r0, r1), (w, mp) in plan:
        nqb = -(-(r1 - r0) // rows_dq)
        be.launch(kdq, sdq, [w["q"][0], w["k"][0], w["v"][0], w["o"][0], w["lse"][0], w["dout"][0],
                             w["dq"][0]] + ms(w),
                  params(b0, b1, r0, r1, nqb, 0, w, mp, w["dq"][1], 0), (b1 - b0) * nqb)
