"""Tiled matmul (f32, and f16 with f32 accumulation), batched with broadcasting, split to fit bindings.

Why this shape: the fast variant measured on an H200 through wgpu is a 128x128 tile per workgroup,
256 threads, 8x8 outputs per thread in 16 NAMED vec4<f32> accumulators (a runtime-indexed private
array spills to memory and was ~30x slower), BK=8, A and B staged in workgroup memory. Large products whose
operands bind read-only, compiled without naga's checks (Vulkan, shaders.py), with K >= 512, take a 128x256 tile
of 8x16 a thread instead (matmul_tune huge_db: 0.80-0.83x cuBLAS f32 on an H100; slower than 128x128 at shorter
K). The unrolled body is assembled here from the named pieces of kernels/matmul.wgsl. Small or odd shapes take a
smaller tile so fewer threads idle. Every load and store is bounds checked, so any M, N, K works.

Tile and K-split per shape class: matmul_tune.py (a fixed table, or autotuned and cached on disk per
adapter: under tier fast on a GPU by default, everywhere with SCELLIS_MATMUL_TUNE=on). A K-split runs the
splits as workgroups along z into a f32 partial buffer (scratch) and sums them in a fixed order with matmul_ksplit.wgsl; its boundaries
(KC_UNIT) do not depend on the tile variant, so the shape rule's split sums in one order under debug.

16-byte loads: where B (row-major) or A^T has whole vec4s along its rows (row stride, extent, offset and
batch strides multiples of 4, f32), it binds as vec4s and each thread's 4 contiguous elements load at once
(`_vec4`): the same values into the same tiles, so the same bits. On an H100 (2026-12-05) 4096^3 ran at 35.2
TFLOP/s against 33.1, and the GPT step in 49.7 ms against 55.3 (SCELLIS_MATMUL_VEC4=off, one call). f16
operands load as 8-byte vec4<f16>s the same way: f16 2048^3 / 4096^3 ran at 33.7 / 33.5 TFLOP/s against 26.3 /
24.6 with scalar loads, and the mixed-precision GPT step in 56.3 ms against 66.3 (H100, 2026-12-05 late, one
call; SCELLIS_MATMUL_VEC4_F16=off to compare). A row-major A can load 4 k of a row at once, put into the
k-major tile as 4 components (fetch_a_v4 / put_a_v4; SCELLIS_MATMUL_VEC4_AROWS=on|off). For f16 operands
(8-byte loads instead of four 2-byte ones) it took the mixed step from 61.9 to 56.0-56.4 ms, so it is on for
them; for f32 it ran 4096^3 at 34.8 TFLOP/s against 35.4 without, and 2048^3 the same (33.7 / 33.9), so it
is off there.

Packed f16 (tier fast) folds each f16 partial into its f32 accumulator after every staged tile (BK products);
SCELLIS_MATMUL_FOLD=<products> folds after whole tiles totalling that many instead (fewer f16 -> f32
conversions, a longer f16 partial), to measure what the conversions cost on a GPU; not measured on one yet.

Transposed operands (attrs trans_a / trans_b, set by program/transpose_fold.py where a permute fed the
matmul): A stored [.., K, M], B stored [.., N, K]; the kernel loads them along their contiguous axis into
the same k-major tiles, and windows, chunking and the K-split follow the stored layout (row stride lda / ldb).

Splitting: when an operand or the output exceeds the binding limit the launcher cuts the work into
chunks (a batch box, an M row block, an N column block, a K block), binds aligned windows (A rows
and C rows are contiguous over an M block; B rows over a K block) with element offsets in params,
and adds K blocks onto C in increasing k order (the kernel's `acc` flag reads C first). The order is
fixed, there are no atomics, so results are deterministic run to run.
"""
from __future__ import annotations

import functools
import math
import struct

from .... import dtypes as dt, settings
from ....errors import KernelError
from ..templates import WGSL_TYPE, enable_f16, render, snippet
from ...storage import Storage
from . import matmul_sgm
from .matmul_tune import (VARIANTS, Tuner, choose, default_config, ksplit_ok, packed_f16, shape_class, tile_strides,
                          time_direct, tune_mode)
from .registry import launcher
from .strided import collapse, contiguous_strides, window

WG_MAX = 65535
XYZW = "xyzw"

# Causal bands (the materialized-score attention's products, attention_scores.py), each with an offset b
# per chunk (Params off.w; `band_offset`): tiles or k ranges outside it are zeros the product may skip.
#   BAND_TILES  C [queries, keys]: a tile whose every column is past its last row + b is not computed
#               (nor stored: its callers never read such entries; with an epilogue, which then writes
#               what the band means, it is stored through the epilogue from a zero product where a
#               product banded by BAND_KEND / BAND_KBEG may read it, within BAND_REACH of the band)
#   BAND_KEND   A [queries, keys] times B [keys, ..]: row i sums k <= i + b only (later A entries are 0)
#   BAND_KBEG   A^T [keys, queries] times B [queries, ..]: row j sums k >= j + b only (earlier ones are 0)
BAND_TILES, BAND_KEND, BAND_KBEG = 1, 2, 3
BAND_SECTIONS = {BAND_TILES: "band_tiles", BAND_KEND: "band_kend", BAND_KBEG: "band_kbeg"}
# The rows of the tallest tile: a banded product reads C [queries, keys] no further than this many columns
# past the band (BAND_KEND: row i sums k < i + b + REACH; BAND_KBEG: row j from i > j - b - REACH), so
# entries further out need never be written (kernels/matmul.wgsl band_tiles_epi, attention_scores.wgsl fwd).
BAND_REACH = max(v[0] for v in VARIANTS.values())


def band_offset(band: int, coff: int, m0: int, n0: int, k0: int) -> int:
    """The kernel's band offset for a chunk at (m0, n0, k0) of a product whose causal offset (key j may
    follow query i when j <= i + coff) is coff."""
    if band == BAND_TILES:
        return coff + m0 - n0
    if band == BAND_KEND:
        return coff + m0 - k0
    return m0 - coff - k0


def source(variant: str, dtype: str, packed: bool = False, epi: tuple | None = None, ta: bool = False,
           tb: bool = False, band: int = 0, c_dtype: str | None = None, va: bool = False, vb: bool = False,
           ro: tuple[bool, bool] = (False, False)) -> str:
    """WGSL of one tile variant. `packed` (f16 only): vec4<f16> math into f16 partials folded into f32
    accumulators every BK k-steps; otherwise f32 math on widened operands. `epi`: an epilogue's
    (module-scope WGSL, input count, enable line) from kernels/epilogue.py, run by the store. `ta` / `tb`:
    A is stored [K, M] / B is stored [N, K] (a folded transpose), loaded along its contiguous axis into
    the same tiles. `band` (BAND_*; the offset in Params off.w): a causal band the product may skip.
    `c_dtype`: C's element type when it is not the operands' (f32 K-split partials of f16 operands). `va` /
    `vb`: A / B bind as vec4s and each thread's 4 contiguous elements load as one 16-byte load (`_vec4`): 4 m of
    A^T, 4 k of a row-major A (put into the k-major tile as 4 components), 4 n of B. `ro`: A / B bind read-only
    (`_readonly`)."""
    return _source(variant, dtype, packed, epi, ta, tb, band, c_dtype, va, vb, _fold_every(variant, packed),
                   tuple(ro))


@functools.lru_cache(maxsize=None)
def _source(variant: str, dtype: str, packed: bool, epi: tuple | None, ta: bool, tb: bool, band: int,
            c_dtype: str | None, va: bool, vb: bool, every: int, ro: tuple = (False, False)) -> str:
    """source() with the packed path's fold interval (staged tiles per f16 partial) made explicit."""
    if vb and tb:
        raise KernelError("vec4 loads of B need B untransposed", where="op 'matmul'", hint="engine bug")
    tm, tn, rm, rn, bk, flags = VARIANTS[variant]
    prefetch = "pf" in flags
    if packed and dtype != "f16":
        raise KernelError("packed-f16 matmul needs f16 operands", where="op 'matmul'")
    txn, tym = tn // rn, tm // rm
    threads = txn * tym
    gm, gn = rm // 4, rn // 4                 # vec4 groups per thread along m and n
    sm, sn = tm // gm, tn // gn               # distance (elements) between a thread's groups
    a_slots = tm * bk // 4 // threads         # vec4 (4 rows x 1 k) A loads per thread per k-step
    b_slots = bk * tn // 4 // threads         # vec4 (1 k x 4 cols) B loads per thread per k-step
    assert a_slots * threads * 4 == tm * bk and b_slots * threads * 4 == tn * bk
    t = WGSL_TYPE[dtype]
    ct = WGSL_TYPE[c_dtype or dtype]
    if epi and ct != t:
        raise KernelError("a matmul epilogue stores the operands' dtype", where="op 'matmul'", hint="engine bug")
    st = "f16" if packed else "f32"
    astr, bstr, nbuf = tile_strides(variant, packed, tb)   # padded k-rows; nbuf 2: double-buffered (loop_db)
    ao, bo = bk * astr, bk * bstr             # the second buffer's offsets (vec4s)
    sn_ = functools.partial(snippet, "matmul")
    accs = [(r, h) for r in range(rm) for h in range(gn)]

    decl = [sn_("acc", R=r, H=h) for r, h in accs]
    if packed:
        decl += [sn_("hacc", R=r, H=h) for r, h in accs]
    decl += [sn_("stage_a", J=j, ST=st) for j in range(a_slots)]
    decl += [sn_("stage_b", J=j, ST=st) for j in range(b_slots)]
    def puts(buf: int) -> list[str]:
        a0, b0 = buf * ao, buf * bo
        if ta:
            out = [sn_("put_a_t", J=j, E0=j * threads, TM4=tm // 4, ASTR=astr, AO=a0) for j in range(a_slots)]
        elif va:
            out = [sn_("put_a_v4", J=j, E0=j * threads, BK4=bk // 4, TM4=astr, AO=a0) for j in range(a_slots)]
        else:
            out = [sn_("put_a", J=j, E0=j * threads, BK=bk, TM4=astr, AO=a0) for j in range(a_slots)]
        if tb:
            out += [sn_("put_b_t", J=j, E0=j * threads, BK=bk, BSTR=bstr, BO=b0) for j in range(b_slots)]
        else:
            out += [sn_("put_b", J=j, E0=j * threads, BO=b0) for j in range(b_slots)]
        return out
    if ta:
        fetch = [sn_("fetch_a_t_v4" if va else "fetch_a_t", J=j, E0=j * threads, TM4=tm // 4, ST=st)
                 for j in range(a_slots)]
    elif va:
        fetch = [sn_("fetch_a_v4", J=j, E0=j * threads, BK4=bk // 4, ST=st) for j in range(a_slots)]
    else:
        fetch = [sn_("fetch_a", J=j, E0=j * threads, BK=bk, ST=st) for j in range(a_slots)]
    if tb:
        fetch += [sn_("fetch_b_t", J=j, E0=j * threads, BK=bk, ST=st) for j in range(b_slots)]
    else:
        fetch += [sn_("fetch_b_v4" if vb else "fetch_b", J=j, E0=j * threads, TN4=tn // 4, ST=st)
                  for j in range(b_slots)]
    put = puts(0)
    acc = "h" if packed else "c"
    fma = "fma_fused" if "fma" in flags else "fma"
    def compute(buf: int) -> str:
        comp = []
        for kk in range(bk):
            fmas = [" ".join(sn_(fma, ACC=acc, ST=st, R=g * 4 + i, G=g, C=XYZW[i], H=h) for h in range(gn))
                    for g in range(gm) for i in range(4)]
            comp.append(sn_("k_step",
                            A_REGS="\n".join(sn_("a_reg", G=g, I=buf * ao + kk * astr + g * sm // 4)
                                             for g in range(gm)),
                            B_REGS="\n".join(sn_("b_reg", H=h, I=buf * bo + kk * bstr + h * sn // 4)
                                             for h in range(gn)),
                            FMAS="\n".join(fmas)))
        return "\n".join(comp)
    fold = [sn_("fold", R=r, H=h) for r, h in accs] if packed else []
    rest = ""
    if every > 1:       # fold every `every` staged tiles (a counter kt), and what is left after the loop
        rest = sn_("fold_rest", FOLD="\n".join(fold))
        fold = [sn_("fold_every", F=every, FOLD="\n".join(fold))]
        decl.append(sn_("fold_counter"))
    if nbuf == 2:
        mainloop = sn_("loop_db", BK=bk, FETCH="\n".join(fetch), PUT0="\n".join(put), PUT1="\n".join(puts(1)),
                       COMPUTE0=compute(0), COMPUTE1=compute(1), FOLD="\n".join(fold))
    else:
        mainloop = sn_("loop_prefetch" if prefetch else "loop", BK=bk, FETCH="\n".join(fetch),
                       PUT="\n".join(put), COMPUTE=compute(0), FOLD="\n".join(fold))
    cols = "store_cols_epi" if epi else "store_cols"
    store = [sn_("store_row", ROW=g * sm + i,
                 COLS="\n".join(sn_(cols, COL=h * sn, R=g * 4 + i, H=h, T=ct) for h in range(gn)))
             for g in range(gm) for i in range(4)]
    epi_text, epi_params, enable = _epi_parts(epi, dtype)

    wt = "wt" in flags
    if wt and (txn % 8 or tym % 4):
        raise KernelError(f"tile {variant} cannot be warp-tiled", where="op 'matmul'", hint="engine bug")
    return render("matmul", flags={"VA": va, "VB": vb, "WT": wt}, WX=txn // 8 if wt else 1,
                  AACC="read" if ro[0] else "read_write",
                  BACC="read" if ro[1] else "read_write", ENABLE=enable, T=t, CBT=ct, ST=st, TM=tm, TN=tn, RM=rm,
                  RN=rn, BK=bk,
                  THREADS=threads, TXN=txn, AS_LEN=nbuf * bk * astr, BS_LEN=nbuf * bk * bstr,
                  DECL="\n".join(decl), MAINLOOP=mainloop + "\n" + rest, STORE="\n".join(store),
                  EPI_PARAMS=epi_params, EPILOGUE=epi_text,
                  BAND=sn_(BAND_SECTIONS[band] + ("_epi" if epi and band == BAND_TILES else ""), TM=tm, REACH=BAND_REACH)
                  if band else "")


FOLD_PRODUCTS = 0      # products a packed-f16 partial sums by default (0: one staged tile, BK)


def fold_tiles(bk: int) -> int:
    """Staged tiles (BK k-steps each) a packed-f16 partial sums before it is folded into f32: enough for
    SCELLIS_MATMUL_FOLD products (default FOLD_PRODUCTS, or BK), at least one tile."""
    products = settings.number("SCELLIS_MATMUL_FOLD", FOLD_PRODUCTS or bk)
    return max(1, products // bk)


def _fold_every(variant: str, packed: bool) -> int:
    """Staged tiles per f16 partial of this variant's kernel (1 unless packed): its source and its key."""
    return fold_tiles(VARIANTS[variant][4]) if packed else 1


def _epi_parts(epi, dtype: str) -> tuple[str, str, str]:
    """(EPILOGUE, EPI_PARAMS, ENABLE) of a kernel with epilogue `epi` (None: none)."""
    if not epi:
        return "", "", enable_f16(dtype)
    text, (ne, nd), enable = epi[:3]
    return text, snippet("matmul", "epi_params", NE=ne, ND=nd), enable or enable_f16(dtype)


def _batch_strides(shape, out_batch):
    """Strides (elements) of an operand's batch dims read under broadcasting to out_batch."""
    st = contiguous_strides(shape)[:-2]
    bshape = shape[:-2]
    lead = len(out_batch) - len(bshape)
    return tuple(0 if i < lead or bshape[i - lead] == 1 else st[i - lead] for i in range(len(out_batch)))


def _win_bytes(s, lo: int, hi: int, isz: int, align: int) -> int:
    start = s.offset + lo * isz
    size = s.offset + (hi + 1) * isz - start // align * align
    return (size + 3) // 4 * 4


def _halve(x: int, unit: int) -> int:
    """About half of x, kept a multiple of the tile `unit` while that is possible."""
    h = (x + 1) // 2
    if h > unit:
        h = (h + unit - 1) // unit * unit
        if h >= x:
            h = x - unit
    return max(h, 1)


class _Plan:
    def __init__(self, be, a, b, out, bshape, strides, m, n, k, isz, ta=False, tb=False, csz=None):
        self.be, self.a, self.b, self.c = be, a, b, out
        self.bshape, self.strides = bshape, strides        # strides: (sa, sb, sc) over bshape
        self.m, self.n, self.k, self.isz = m, n, k, isz
        self.sizes = (isz, isz, csz or isz)                # element bytes of A, B, C (C f32 under f16 operands)
        self.ta, self.tb = ta, tb                          # A stored [K, M] / B stored [N, K]
        self.lda, self.ldb = (m if ta else k), (k if tb else n)
        self.lim, self.align = be.binding_limit - be.offset_align, be.offset_align  # slack: windows start aligned down

    def spans(self, bstart, bsize, m0, m1, n0, n1, k0, k1):
        """(lo, hi) element ranges of A, B, C for one chunk (rows and columns of each stored matrix)."""
        ar = (k0, k1, m0, m1) if self.ta else (m0, m1, k0, k1)
        br = (n0, n1, k0, k1) if self.tb else (k0, k1, n0, n1)
        out = []
        for st, rs, r0, r1, c0, c1 in ((self.strides[0], self.lda, *ar),
                                       (self.strides[1], self.ldb, *br),
                                       (self.strides[2], self.n, m0, m1, n0, n1)):
            lo = sum(a * s for a, s in zip(bstart, st)) + r0 * rs + c0
            hi = lo + sum((z - 1) * s for z, s in zip(bsize, st)) + (r1 - r0 - 1) * rs + (c1 - c0 - 1)
            out.append((lo, hi))
        return out

    def fails(self, bstart, bsize, m0, m1, n0, n1, k0, k1):
        """Which operands ('a', 'b', 'c') of this chunk do not fit the binding limit."""
        bad = []
        for name, s, sz, (lo, hi) in zip("abc", (self.a, self.b, self.c), self.sizes,
                                         self.spans(bstart, bsize, m0, m1, n0, n1, k0, k1)):
            if _win_bytes(s, lo, hi, sz, self.align) > self.lim:
                bad.append(name)
        return bad


# which dims to halve, in order, when an operand's chunk overflows the binding: C is (M, N), A (M, K), B (K, N);
# the row dim of the stored matrix first (its blocks are contiguous windows): a transposed A is stored (K, M),
# a transposed B (N, K)
HALVE_ORDER = {"c": ("m", "n"), "a": ("m", "k"), "b": ("k", "n")}
HALVE_ORDER_T = {"a": ("k", "m"), "b": ("n", "k")}


def _matrix_blocks(plan: _Plan):
    """Block sizes (mb, nb, kb) so one batch element's chunk fits: split M first, then K, then N."""
    size = {"m": plan.m, "n": plan.n, "k": plan.k}
    zero = (0,) * len(plan.bshape)
    one = (1,) * len(plan.bshape)
    while True:
        bad = plan.fails(zero, one, 0, size["m"], 0, size["n"], 0, size["k"])
        if not bad:
            return size["m"], size["n"], size["k"]
        operand = "c" if "c" in bad else "a" if "a" in bad else "b"
        flipped = plan.ta if operand == "a" else plan.tb if operand == "b" else False
        dim = next((d for d in (HALVE_ORDER_T if flipped else HALVE_ORDER)[operand] if size[d] > 1), None)
        if dim is None:
            raise KernelError("one element does not fit the binding limit", where="op 'matmul'")
        size[dim] = _halve(size[dim], 128)


def _batch_boxes(plan: _Plan, mb, nb, kb):
    """Boxes over the batch dims whose chunks fit the limit, hold <= 65535 elements, at most 3 dims wide."""
    shape = plan.bshape
    r = len(shape)
    whole = (mb, nb, kb) == (plan.m, plan.n, plan.k)
    stack = [((0,) * r, tuple(shape))]
    while stack:
        starts, sizes = stack.pop()
        ok = (math.prod(sizes) <= WG_MAX and all(s == 1 for s in sizes[:max(r - 3, 0)])
              and (math.prod(sizes) == 1 or
                   (whole and not plan.fails(starts, sizes, 0, mb, 0, nb, 0, kb))))
        if ok:
            yield starts, sizes
            continue
        if r > 3 and any(s > 1 for s in sizes[:r - 3]):
            kx = next(i for i in range(r - 3) if sizes[i] > 1)
        else:
            kx = max(range(r), key=lambda i: sizes[i])
        h = sizes[kx] // 2
        lo_sz = list(sizes); lo_sz[kx] = h
        hi_sz = list(sizes); hi_sz[kx] = sizes[kx] - h
        hi_st = list(starts); hi_st[kx] += h
        stack.append((tuple(hi_st), tuple(hi_sz)))
        stack.append((starts, tuple(lo_sz)))


@launcher("matmul")
def _matmul(be, v, ins, out, epi=None):
    """`epi` (kernels/epilogue.py): run that chain in the store; returns False, having launched nothing,
    where it cannot (K blocks added onto C, an empty K)."""
    a, b = ins
    d = v.dtype
    if d not in ("f32", "f16"):
        raise KernelError(f"matmul needs f32 or f16 operands, got {d}", where="op 'matmul'")
    ta, tb = bool(v.attrs.get("trans_a", False)), bool(v.attrs.get("trans_b", False))
    band, coff = v.attrs.get("band", (0, 0))      # internal callers only (attention_scores.py)
    add = bool(v.attrs.get("acc", False))          # internal: C += A @ B (attention_scores' query blocks)
    split = v.attrs.get("split")                   # internal: (variant, splits) for one whole matrix
    c_dtype = v.attrs.get("c_dtype")               # internal: f16 operands into an f32 C (attention_scores)
    mixed = c_dtype not in (None, d)
    if add and epi is not None:
        raise KernelError("an accumulating store with an epilogue in one matmul", where="op 'matmul'",
                          hint="engine bug")
    if mixed and (epi is not None or c_dtype != "f32" or d != "f16" or out.dtype != "f32"):
        raise KernelError(f"a {d} product into a {c_dtype} C takes f16 operands, an f32 C and no epilogue",
                          where="op 'matmul'", hint="engine bug")
    k, m = (a.shape[-2], a.shape[-1]) if ta else (a.shape[-1], a.shape[-2])
    n = b.shape[-2] if tb else b.shape[-1]
    oshape = tuple(v.shape)
    obatch = oshape[:-2]
    if m == 0 or n == 0 or math.prod(obatch) == 0:
        return
    if k == 0:
        if epi is not None:
            return False
        if add:
            return
        from .elementwise import fill
        fill(be, out, 0.0)
        return
    isz = dt.ITEMSIZE[d]
    sa = _batch_strides(tuple(a.shape), obatch)
    sb = _batch_strides(tuple(b.shape), obatch)
    sc = contiguous_strides(oshape)[:-2]
    se = epi.batch_strides() if epi is not None else []
    if obatch:
        bshape, (sa, sb, sc, *se) = collapse(obatch, [sa, sb, sc] + se)
    else:
        bshape, sa, sb, sc = (1,), (0,), (0,), (0,)
        se = [(0,)] * len(se)
    plan = _Plan(be, a, b, out, tuple(bshape), (tuple(sa), tuple(sb), tuple(sc)), m, n, k, isz, ta, tb,
                 dt.ITEMSIZE[c_dtype] if mixed else isz)
    packed = packed_f16(d, getattr(be, "tier", None)) and not mixed
    on_sgm = matmul_sgm.config_for(be, d, getattr(be, "tier", None)) is not None     # (where a tile fits)
    mb, nb, kb = _matrix_blocks(plan)
    if epi is not None and kb < k:
        return False
    # how an unsplit chunk binds A and B (every chunk's windows lie in these storages' buffers): the tuner times that
    ro_whole = _readonly(a.buffer, b.buffer, [out.buffer] + [w.buffer for w in (epi.wins if epi else [])])
    for bstart, bsize in _batch_boxes(plan, mb, nb, kb):
        nbat = math.prod(bsize)
        # the kernel sees the last 3 batch dims of the box (leading ones are size 1 here)
        r = len(bsize)
        tail = list(range(max(r - 3, 0), r))
        dims = [bsize[i] for i in tail]
        st3 = [[plan.strides[o][i] for i in tail] for o in range(3)]
        pad = 3 - len(dims)
        dims = [1] * pad + dims
        st3 = [[0] * pad + s for s in st3]
        e3 = [[0] * pad + [s[i] for i in tail] for s in se]
        for m0 in range(0, m, mb):
            m1 = min(m, m0 + mb)
            for n0 in range(0, n, nb):
                n1 = min(n, n0 + nb)
                whole = (m1 - m0, n1 - n0, kb) == (m, n, k) and nbat == 1
                cm, cn, ck = m1 - m0, n1 - n0, min(k, kb)

                def timer(variant, splits, _b=(bstart, bsize, m0, m1, n0, n1)):
                    return _time_config(be, plan, d, variant, splits, _b, dims, st3, nbat, packed, ro_whole)
                if mixed:       # f16 operands into an f32 C: the rule's tile (the tuner times same-typed C), no split
                    variant, splits = default_config(cm, cn, nbat, ck, d, False, be.binding_limit)[0], 1
                else:
                    variant, splits = choose(be, d, cm, cn, ck, nbat, whole, timer, ta, tb, all(ro_whole),
                                             simt=not on_sgm)
                if split and not mixed and whole and ksplit_ok(split[1], cm, cn, ck, 1, d, None, be.binding_limit):
                    variant, splits = split      # a rule of the caller's shapes: deterministic under debug too
                ep = epi and (epi, epi.params(bstart, se, e3, m0, n0, n1 - n0))
                if splits > 1:
                    _launch_ksplit(be, plan, d, variant, splits, bstart, bsize, m0, m1, n0, n1, ep,
                                   (band, band and band_offset(band, coff, m0, n0, 0)), add)
                    continue
                for ki, k0 in enumerate(range(0, k, kb)):
                    k1 = min(k, k0 + kb)
                    wins, offs = _windows(be, plan, bstart, bsize, m0, m1, n0, n1, k0, k1)
                    bo = band and band_offset(band, coff, m0, n0, k0)
                    params = _params(m1 - m0, n1 - n0, k1 - k0, 1 if ki or add else 0, plan.lda, plan.ldb, n, 0, offs,
                                     dims, nbat, st3, 0, bo)
                    va, vb, wins = _vec4(be, d, ta, tb, wins, offs, plan.lda, plan.ldb, m1 - m0, n1 - n0, st3,
                                         k1 - k0, band)
                    _launch_tile(be, d, variant, wins, params, nbat, packed, ep, ta, tb, band,
                                 c_dtype if mixed else None, vec=(va, vb))
    return True


# kernels/matmul.wgsl Params: M N K acc lda ldb ldc kc, off (x y z, band offset), bsz, sa, sb, sc (.w: split stride)
_PARAMS = struct.Struct("<8I3Ii4I4I4I4I")


def _params(m, n, k, acc, lda, ldb, ldc, kc, offs, dims, nbat, st3, psplit, band_off: int = 0) -> bytes:
    return _PARAMS.pack(m, n, k, acc, lda, ldb, ldc, kc, *offs, band_off, *dims, nbat,
                        *st3[0], 0, *st3[1], 0, *st3[2], psplit)


def _windows(be, plan, bstart, bsize, m0, m1, n0, n1, k0, k1):
    wins, offs = [], []
    for s, sz, (lo, hi) in zip((plan.a, plan.b, plan.c), plan.sizes, plan.spans(bstart, bsize, m0, m1, n0, n1, k0, k1)):
        w, off = window(s, 0, lo, hi, sz, be.offset_align)
        wins.append(w)
        offs.append(off)
    return wins, offs


def _groups(variant, m, n, z):
    tm, tn = VARIANTS[variant][:2]
    gx, gy = math.ceil(n / tn), math.ceil(m / tm)
    if gx > WG_MAX or gy > WG_MAX or z > WG_MAX:
        raise KernelError(f"a {m}x{n} matmul chunk needs more than {WG_MAX} workgroups along one axis",
                          where="op 'matmul'")
    return gx, gy, z


def _key(variant: str, d: str, packed: bool, ta: bool = False, tb: bool = False, band: int = 0,
         c_dtype: str | None = None, va: bool = False, vb: bool = False, ro: tuple = (False, False)) -> str:
    return (f"matmul:{variant}:{d}" + ("+h16" if packed else "") + ("+ta" if ta else "") + ("+tb" if tb else "")
            + (f"+band{band}" if band else "") + (f"+c{c_dtype}" if c_dtype and c_dtype != d else "")
            + ("+va" if va else "") + ("+vb" if vb else "")
            + (f"+fold{f}" if (f := _fold_every(variant, packed)) > 1 else "")
            + ("+ro" + "a" * ro[0] + "b" * ro[1] if any(ro) else ""))


def _readonly(a, b, written) -> tuple[bool, bool]:
    """Whether operands A, B (in GPU buffers `a`, `b`) bind read-only: both, when no binding the dispatch writes
    or declares writable (the buffers `written`: C's, an epilogue's inputs') is the buffer of either; else neither.
    Why: declared `read`, their loads need not stay ordered with the tile loop's barriers. On an H100 the f32
    big tile ran 4096^3 at 38.1 TFLOP/s with both read-only against 35.0, but at 37.2 with A alone and 30.0-35.8
    with B alone; and the GPT step, whose products mostly share the arena with one operand, ran at 48.9-49.0 ms
    with either read-only where it could be, against 48.5-48.7 without (RESULTS.md, 2026-12-06, 08:4x-09:0x).
    SCELLIS_MATMUL_READONLY=off: always read_write (to compare)."""
    if not settings.flag("SCELLIS_MATMUL_READONLY"):
        return False, False
    ok = all(w is not a and w is not b for w in written)
    return ok, ok


def vec4_enabled(operand: str = "") -> bool:
    """Whether aligned operands load as vec4s (SCELLIS_MATMUL_VEC4=off: never; to compare). operand "f16":
    whether f16 operands do, as 8-byte vec4<f16> loads (SCELLIS_MATMUL_VEC4_F16=off: not); "a-rows:<dtype>":
    whether a row-major A does too (SCELLIS_MATMUL_VEC4_AROWS=on|off; by default for f16, where it sped the
    mixed step up, not for f32, where it did not: module docstring)."""
    if not settings.flag("SCELLIS_MATMUL_VEC4"):
        return False
    if operand == "f16":
        return settings.flag("SCELLIS_MATMUL_VEC4_F16")
    if operand.startswith("a-rows"):          # "a-rows:f16" / "a-rows:f32"
        return settings.flag("SCELLIS_MATMUL_VEC4_AROWS", operand.endswith("f16"))
    return True


def _vec4(be, d: str, ta: bool, tb: bool, wins: list, offs, lda: int, ldb: int, m: int, n: int, st3,
          k: int = 0, band: int = 0) -> tuple:
    """(va, vb, windows): whether A and B of this launch load 4 contiguous elements as one vec4 (f32, or f16 as
    vec4<f16> where asked for: the operand's row stride, its extent along the loaded axis (M for A^T, K for a
    row-major A, N for B), its element offset and batch strides all multiples of 4, so a vec4 never straddles
    a row, the bound or a batch; a row-major A also not under BAND_KBEG, whose k range may start inside a
    vec4); their windows then grow to whole 16 bytes (a buffer's size is a multiple of 16 bytes, so the bytes
    are there), since a binding's vec4 array length rounds down and bounds-checked reads past it would be
    clamped."""
    if not vec4_enabled() or d not in ("f32", "f16") or (d == "f16" and not vec4_enabled("f16")):
        return False, False, wins

    grown = [_vec4_window(be, w) for w in wins[:2]]

    def ok(i: int, ld: int, extent: int) -> bool:
        return (ld % 4 == 0 and extent % 4 == 0 and offs[i] % 4 == 0 and all(x % 4 == 0 for x in st3[i])
                and grown[i] is not None)
    va = ok(0, lda, m) if ta else (k > 0 and band != BAND_KBEG and vec4_enabled(f"a-rows:{d}") and ok(0, lda, k))
    vb = (not tb) and ok(1, ldb, n)
    wins = list(wins)
    for flag, i in ((va, 0), (vb, 1)):
        if flag:
            wins[i] = grown[i]
    return va, vb, wins


def _vec4_window(be, w: Storage) -> Storage | None:
    """Window `w` grown to whole 16 bytes, as an operand bound as vec4s needs (a binding's vec4 array length rounds
    down; a buffer's size is a multiple of 16 bytes, so the bytes are there); None where its offset is not 16-byte
    aligned or the grown window passes the binding limit."""
    nbytes = (w.nbytes + 15) // 16 * 16
    if w.offset % 16 or nbytes > be.binding_limit:
        return None
    return Storage(be, w.buffer, w.offset, w.shape, w.dtype, nbytes)


def _launch_tile(be, d, variant, wins, params, z, packed=False, ep=None, ta=False, tb=False, band=0, c_dtype=None,
                 vec=(False, False)):
    m, n = struct.unpack_from("<2I", params)
    va, vb = vec
    if _launch_sgm(be, d, wins, params, z, m, n, ep, ta, tb, band, c_dtype, vec):
        return
    if ep:          # (Epilogue, its chunk params): inputs bound after A, B, C
        src = ep[0].source(4)
        ro = _readonly(wins[0].buffer, wins[1].buffer, [w.buffer for w in (wins[2], *ep[0].wins)])
        be.launch(_key(variant, f"epi{src[3]}:{d}", packed, ta, tb, band, None, va, vb, ro),
                  lambda: source(variant, d, packed, src, ta, tb, band, None, va, vb, ro), list(wins) + ep[0].wins,
                  params + ep[1], _groups(variant, m, n, z))
        return
    ro = _readonly(wins[0].buffer, wins[1].buffer, [wins[2].buffer])
    be.launch(_key(variant, d, packed, ta, tb, band, c_dtype, va, vb, ro),
              lambda: source(variant, d, packed, None, ta, tb, band, c_dtype, va, vb, ro), wins, params,
              _groups(variant, m, n, z))


def _launch_sgm(be, d, wins, params, z, m, n, ep, ta, tb, band, c_dtype, vec) -> bool:
    """Launch the chunk on the matrix units (kernels/matmul_sgm.py) where the device offers them for `d` under the
    program's tier and a tile fits; False (nothing launched) otherwise."""
    cfg = matmul_sgm.config_for(be, d, getattr(be, "tier", None))
    if cfg is None:
        return False
    vals = _PARAMS.unpack_from(params)
    k, kc, lds, offs = vals[2], vals[7], vals[4:6], vals[8:10]
    s3 = (vals[16:19], vals[20:23])
    grown = [_vec4_window(be, w) for w in wins[:2]]

    def whole(tile: str) -> bool:
        return None not in grown and matmul_sgm.whole_fits(cfg, tile, m, n, k, kc, band, offs, s3, lds, vals[11])
    name = _sgm_tile(be, cfg, d, m, n, k, z, ta, tb, whole)
    if name is None:
        return False
    if name in matmul_sgm.WHOLE:    # A and B bound as vec4s, their windows grown to whole 16 bytes
        wins, vec = grown + list(wins[2:]), (True, True)
    tm = matmul_sgm.tile(cfg, name)[0]
    if band and tm > BAND_REACH:       # a banded product's reach is counted in rows of the tallest SIMT tile
        return False
    va, vb = vec
    band_text = (snippet("matmul", BAND_SECTIONS[band] + ("_epi" if ep and band == BAND_TILES else ""), TM=tm,
                         REACH=BAND_REACH) if band else "")
    gx, gy = matmul_sgm.groups(cfg, name, m, n)
    if max(gx, gy, z) > WG_MAX:
        return False
    csf = matmul_sgm.cs_frags(cfg, name, matmul_sgm.smem_limit(be))
    tkey = matmul_sgm.key(cfg, name, csf)
    if ep:
        src = ep[0].source(4)
        ro = _readonly(wins[0].buffer, wins[1].buffer, [w.buffer for w in (wins[2], *ep[0].wins)])
        parts = _epi_parts(src, d)
        be.launch(_sgm_key(_key(tkey, f"epi{src[3]}:{d}", False, ta, tb, band, None, va, vb, ro)),
                  lambda: matmul_sgm.source(cfg, name, d, parts, band_text, ta, tb, va, vb, ro, None, csf),
                  list(wins) + ep[0].wins, params + ep[1], (gx, gy, z))
        return True
    ro = _readonly(wins[0].buffer, wins[1].buffer, [wins[2].buffer])
    be.launch(_sgm_key(_key(tkey, d, False, ta, tb, band, c_dtype, va, vb, ro)),
              lambda: matmul_sgm.source(cfg, name, d, _epi_parts(None, d), band_text, ta, tb, va, vb, ro, c_dtype,
                                        csf),
              wins, params, (gx, gy, z))
    return True


def _sgm_tile(be, cfg, d: str, m: int, n: int, k: int, z: int, ta: bool, tb: bool,
              whole=lambda tile: False) -> str | None:
    """The subgroup-matrix tile of an m x n x k product (z of them): the rule's (matmul_sgm.choose_tile), or where
    the matmul tuner runs (SCELLIS_MATMUL_TUNE=on, or auto under tier fast on a GPU) the fastest fitting tile,
    timed once per shape class on scratch operands and cached with the SIMT tiles' choices. `whole(tile)`: whether
    this chunk fits a whole tile (the tuner's key says so: a class's whole and bounded chunks choose apart)."""
    rule = matmul_sgm.choose_tile(cfg, be, m, n, whole)
    if rule is None or settings.text("SCELLIS_MATMUL_SGM_TILE") or tune_mode(be) != "on":
        return rule
    tuner = getattr(be, "_matmul_tuner", None)
    if tuner is None:
        tuner = be._matmul_tuner = Tuner(be)
    ok = matmul_sgm.candidates(cfg, be, whole)
    key = (f"sgm:{matmul_sgm.key(cfg, '')}:{shape_class(d, m, n, k, z)}" + (":ta" if ta else "") + (":tb" if tb else "")
           + (":whole" if any(t in matmul_sgm.WHOLE for t in ok) else ""))
    got = tuner.table.get(key)
    if got is None or got[0] not in ok:
        times = {}
        for name in ok:
            try:
                times[name] = _time_sgm(be, cfg, name, d, m, n, k, z, ta, tb)
            except Exception:       # a tile that fails to build or run here is simply not chosen
                continue
        got = tuner.table[key] = (min(times, key=times.get) if times else rule, 1)
        tuner.save()
    return got[0]


def _time_sgm(be, cfg, name: str, d: str, m: int, n: int, k: int, z: int, ta: bool, tb: bool) -> float:
    """Seconds per run of tile `name` on an m x n x k product (z of them) over scratch operands, outside any
    program (the real operands may not hold data yet); A and B read-only, not vec4."""
    isz = dt.ITEMSIZE[d]
    bufs = [be._buffer(max(4, z * x * isz)) for x in (m * k, k * n, m * n)]
    s3 = [[0, 0, m * k], [0, 0, k * n], [0, 0, m * n]] if z > 1 else [[0, 0, 0]] * 3
    ro = (True, True)
    csf = matmul_sgm.cs_frags(cfg, name, matmul_sgm.smem_limit(be))
    vec = name in matmul_sgm.WHOLE      # (a whole tile binds A and B as vec4s whatever it is given)
    pipe = be.pipeline(_sgm_key(_key(matmul_sgm.key(cfg, name, csf), d, False, ta, tb, 0, None, vec, vec, ro)),
                       matmul_sgm.source(cfg, name, d, _epi_parts(None, d), "", ta, tb, vec, vec, ro, None, csf))
    params = _params(m, n, k, 0, m if ta else k, k if tb else n, n, 0, (0, 0, 0), [1, 1, z], z, s3, 0)
    ubuf = be.device.create_buffer_with_data(data=params + bytes((-len(params)) % 16), usage=0x40 | 0x08)
    entries = [{"binding": 0, "resource": {"buffer": ubuf, "offset": 0, "size": ubuf.size}}]
    entries += [{"binding": i + 1, "resource": {"buffer": b, "offset": 0, "size": b.size}} for i, b in enumerate(bufs)]
    bg = be.device.create_bind_group(layout=pipe.get_bind_group_layout(0), entries=entries)
    gx, gy = matmul_sgm.groups(cfg, name, m, n)
    return time_direct(be, bufs[0], [(pipe, bg, (gx, gy, z))])


def _sgm_key(k: str) -> str:
    """A matmul pipeline key renamed to kernel `matmul_sgm` (its own kernel name: never in shaders.TRUSTED)."""
    return "matmul_sgm" + k[len("matmul"):]


def _ksplit_partials(be, m, n, splits) -> Storage:
    nbytes = m * n * splits * 4
    return Storage(be, be.scratch("matmul-ksplit", nbytes), 0, (splits, m, n), "f32", nbytes)


KC_UNIT = 16     # split boundaries on multiples of the deepest BK, so they do not depend on the tile variant


def _ksplit_kc(k, splits, variant=None):
    """k per split: the same for every tile variant, so a split fixed by shape (debug) sums in one order."""
    return math.ceil(math.ceil(k / splits) / KC_UNIT) * KC_UNIT


def _launch_ksplit(be, plan, d, variant, splits, bstart, bsize, m0, m1, n0, n1, ep=None, band=(0, 0), add=False):
    """One matrix (the whole problem, f32 or f16 operands): `splits` partial products in parallel into f32
    partials (f16 operands: each split sums in f32, as the unsplit kernel does), then their fixed-order sum.
    band: (BAND_* or 0, its offset); a skipped tile leaves its partials unwritten, and so its C entries.
    add: the sum adds onto C."""
    m, n, k = m1 - m0, n1 - n0, plan.k
    wins, offs = _windows(be, plan, bstart, bsize, m0, m1, n0, n1, 0, k)
    part = _ksplit_partials(be, m, n, splits)
    kc = _ksplit_kc(k, splits, variant)
    nsplit = math.ceil(k / kc)
    z3 = [[0, 0, 0]] * 3
    params = _params(m, n, k, 0, plan.lda, plan.ldb, n, kc, (offs[0], offs[1], 0), [1, 1, 1], 1, z3, m * n, band[1])
    va, vb, vw = _vec4(be, d, plan.ta, plan.tb, [wins[0], wins[1]], offs, plan.lda, plan.ldb, m, n, z3, k, band[0])
    _launch_tile(be, d, variant, vw + [part], params, nsplit, packed_f16(d, getattr(be, "tier", None)),
                 None, plan.ta, plan.tb, band[0], "f32", vec=(va, vb))
    if ep:          # the epilogue runs in the sum, after the last partial
        src = ep[0].source(3)
        be.launch(f"matmul_ksplit:epi{src[3]}:{d}", ksplit_source(d, src), [part, wins[2]] + ep[0].wins,
                  struct.pack("<4I", m * n, nsplit, 0, offs[2]) + ep[1], math.ceil(m * n / 256))
        return
    be.launch(f"matmul_ksplit:{d}", ksplit_source(d), [part, wins[2]],
              struct.pack("<4I", m * n, nsplit, int(add), offs[2]), math.ceil(m * n / 256))


@functools.lru_cache(maxsize=None)
def ksplit_source(dtype: str, epi: tuple | None = None) -> str:
    text, params, enable = _epi_parts(epi, dtype)
    return render("matmul_ksplit", flags={"EPI": bool(epi)}, ENABLE=enable, T=WGSL_TYPE[dtype],
                  EPI_PARAMS=params, EPILOGUE=text)


def _time_config(be, plan, d, variant, splits, box, dims, st3, nbat, packed=False,
                 ro_whole=(False, False)) -> float:
    """Seconds per run of this chunk under (variant, splits), run on scratch copies outside any program
    (autotuning: the real operands may not hold data yet). The kernel timed loads A^T and B as vec4s where
    the launch would (`_vec4` on the scratch operands' strides and extents), and binds them read-only where
    the launch would: a split always (its partials are scratch), an unsplit product as `ro_whole` says (the
    real operands' buffers against C's and an epilogue's)."""
    bstart, bsize, m0, m1, n0, n1 = box
    m, n, k = m1 - m0, n1 - n0, plan.k
    isz, ta, tb = plan.isz, plan.ta, plan.tb
    lda, ldb = (m if ta else k), (k if tb else n)
    bufs = [be._buffer(max(4, nbat * x * isz)) for x in (m * k, k * n, m * n)]
    dispatches = []

    def add(key, src, buffers, params, groups):
        pipe = be.pipeline(key, src)
        ubuf = be.device.create_buffer_with_data(data=params + bytes((-len(params)) % 16), usage=0x40 | 0x08)
        entries = [{"binding": 0, "resource": {"buffer": ubuf, "offset": 0, "size": ubuf.size}}]
        entries += [{"binding": i + 1, "resource": {"buffer": b, "offset": 0, "size": b.size}}
                    for i, b in enumerate(buffers)]
        bg = be.device.create_bind_group(layout=pipe.get_bind_group_layout(0), entries=entries)
        dispatches.append((pipe, bg, groups))

    def vec(s3) -> tuple[bool, bool]:
        wins = [Storage(be, b, 0, (b.size // isz,), d, b.size) for b in bufs[:2]]
        return _vec4(be, d, ta, tb, wins, (0, 0), lda, ldb, m, n, s3, k)[:2]
    if splits > 1:
        kc = _ksplit_kc(k, splits, variant)
        nsplit = math.ceil(k / kc)
        part = be._buffer(m * n * splits * 4)
        z3 = [[0, 0, 0]] * 3
        va, vb = vec(z3)
        ro = _readonly(bufs[0], bufs[1], [part])
        add(_key(variant, d, packed, ta, tb, 0, "f32", va, vb, ro),
            source(variant, d, packed, None, ta, tb, 0, "f32", va, vb, ro), [bufs[0], bufs[1], part],
            _params(m, n, k, 0, lda, ldb, n, kc, (0, 0, 0), [1, 1, 1], 1, z3, m * n), _groups(variant, m, n, nsplit))
        add(f"matmul_ksplit:{d}", ksplit_source(d), [part, bufs[2]], struct.pack("<4I", m * n, nsplit, 0, 0),
            (min(math.ceil(m * n / 256), WG_MAX), math.ceil(math.ceil(m * n / 256) / WG_MAX), 1))
    else:
        s3 = [[0, 0, 0], [0, 0, 0], [0, 0, 0]]
        if nbat > 1:
            s3 = [[0, 0, m * k], [0, 0, k * n], [0, 0, m * n]]
        va, vb = vec(s3)
        add(_key(variant, d, packed, ta, tb, 0, None, va, vb, ro_whole),
            source(variant, d, packed, None, ta, tb, 0, None, va, vb, ro_whole), bufs,
            _params(m, n, k, 0, lda, ldb, n, 0, (0, 0, 0), [1, 1, nbat], nbat, s3, 0), _groups(variant, m, n, nbat))
    be.flush()
    return time_direct(be, bufs[2], dispatches)
