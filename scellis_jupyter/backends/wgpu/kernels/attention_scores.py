"""Attention through materialized scores, up to 16384 keys: batched matmuls and row kernels.

Why: at short lengths (the GPT's L = 256) the flash kernels spend their time on per-block overheads
(staging, the running-max bookkeeping) rather than arithmetic, while the products of the textbook
formulation are ordinary batched matmuls that run at the matmul's rate; with a causal mask they skip
the tiles and k ranges past the diagonal (matmul.py BAND_*), about half the work at long lengths.
So, over chunks of whole heads whose Lq x Lk scores fit a scratch buffer (SCORES_BYTES), the
forward is S = q k^T, a row kernel P = softmax(S * scale) with lse (kernels/attention_scores.wgsl:fwd),
out = P v; the backward recomputes P from lse (:probs), dP = dout v^T, dS = P (dP - rowsum(dout * out)) scale
(:dscores), dv = P^T dout, dq = dS k, dk = dS^T q. Without a mask the backward computes P and dS in the stores of the
products that make S and dP (epilogues :epi_probs, :epi_dscores, after a :delta row kernel), which saves a
read and a write of the scores each. It takes f32 and f16 (f16 operands are widened to f32
copies, O(L d) beside the O(L^2 d) products, and the results rounded back once: on an H100 the f32 score path
ran fwd+bwd at L 1024 / 4096 / 8192 in 3.36 / 23.7 / 23.7 ms where the f16 flash kernels took 6.82 / 49.9 /
49.9). Where the device has matrix units for f16 (kernels/matmul_sgm.py, tiers prod and fast) the f16 products
take the operands as they are, into f32 scores and gradients, with P and dS rounded to f16 for the products that
read them (`half`: FlashAttention's rounding); the backward's fused epilogues are then off. With or without
dropout (class Drop): the forward's row kernel multiplies P by the keep factors of the
flash kernels' mask, one Philox block drawn for 4 keys; the backward's recomputed P keeps each keep bit in
its sign (-P where dropped), and the dS step, which needs P and the factor, leaves P z in P's place for
dv = (P z)^T dout, so no mask is stored.
The scratch is `be.scratch`, so a plan's dry run counts it; a chunk takes at most SCORES_BYTES and
1/MEMORY_SHARE of the device's memory, so a small GPU keeps most of its memory for the model.
SCELLIS_ATTENTION_PATH=flash|scores forces a path (benchmarking; forced, a head whose scores exceed the
budget runs in blocks of whole query rows, so longer sequences than SCORES_MAX_LK can be measured on it),
SCELLIS_ATTENTION_SCORES_MB sets the chunk budget in MiB, SCELLIS_ATTENTION_FUSE=off keeps the backward's row
kernels, SCELLIS_ATTENTION_SPLIT=off the one-head products unsplit (to compare).
"""
from __future__ import annotations

import functools
import hashlib
import math
import struct
from types import SimpleNamespace

from .... import settings
from ...storage import Storage
from ..templates import bindings, render, snippet
from .epilogue import Epilogue
from .matmul import BAND_KBEG, BAND_KEND, BAND_REACH, BAND_TILES, _matmul
from .registry import LAUNCHERS
from .strided import window

# The chunk budget and the longest key sequence the score path takes. On an H100 (2026-12-05, RESULTS.md),
# fwd+bwd f32 at B4 H16 L2048 / B2 H16 L4096 / B1 H8 L8192 ran 14.0 / 29.5 / 32.4 ms on 256 MiB chunks against
# the flash kernels' 25.5 / 50.1 / 49.9 (causal 10.6 / 23.0 / 25.9 against 13.7 / 26.1 / 26.9); on 64 MiB
# chunks the score path was no faster than flash at 4096 (50.9 ms; causal 43.8): bigger chunks, fewer and
# larger dispatches. On 1 GiB chunks (H100, later that day) the products ran B2 H16 L4096 in 27.3 ms of GPU
# time against 29.8 on 256 MiB, B1 H8 L8192 in 27.2 against 33.5 (one head a chunk left the L x 64
# products a single wave of 64x64 tiles), and L 16384 (one 1 GiB head a chunk) in 114 ms against flash's 199.
SCORES_BYTES = 1 << 30    # scratch a score buffer may take (two of them in the backward) ...
MEMORY_SHARE = 32         # ... and at most this fraction of the device's memory (two: 1/16 of it)
SCORES_MAX_LK = 16384     # longer key sequences take the flash kernels
# A chunk of one head leaves the products into [rows, head size] (P v, and the gradients) a single wave of
# 64x64 tiles, and under a causal band the bottom tiles' full-K loops make the critical path. So there they
# K-split (into f32 partials summed in a fixed order): causal B1 H8 L16384 on an H100 (2026-12-05) ran in
# 60.1 ms split 8 ways in tall_pf tiles, against 76.8 unsplit (mid_pf:8 62.0, tall_pf:4 62.3, mid_pf:2 68.8);
# not causal, 91.7 against 100.1 ms. Causal chunks of several heads run these products head by head, split.
ONE_HEAD_SPLIT = ("tall_pf", 8)
SPLIT_MIN_K = 8192        # ... for products over at least this many keys or query rows
NEG_INF = 0xFF800000
WG = 256                  # threads a workgroup of the row kernels


def heads_per_chunk(be, v, t: str, bh: int, lq: int, lk: int, d: int, dv: int, mask) -> tuple[int, int] | None:
    """(heads, query rows) a chunk of the scores path takes, or None where the flash kernels run instead.
    A chunk holds whole heads, or, where one head's scores exceed the chunk budget and the path is forced
    (SCELLIS_ATTENTION_PATH=scores), blocks of whole query rows of one head (softmax is per row, so a block
    is complete; dk and dv add up over a head's blocks)."""
    mode = settings.choice("SCELLIS_ATTENTION_PATH")
    if mode == "flash" or t not in ("f32", "f16") or min(bh, lq, lk, d, dv) == 0:
        return None
    if mode != "scores" and lk > SCORES_MAX_LK:
        return None
    width = max(lk, d, dv) * 4             # the widest per-row binding of the row kernels
    mem = getattr(be, "memory_bytes", None)
    cap = min(settings.number("SCELLIS_ATTENTION_SCORES_MB", 0) << 20
              or min(SCORES_BYTES, mem // MEMORY_SHARE if mem else SCORES_BYTES),
              be.binding_limit - be.offset_align)

    def fits(nb: int, qb: int) -> bool:       # every chunk's mask window within one binding
        if mask is None:
            return True
        for b0 in range(0, bh, nb):
            for r0 in range(0, lq, qb):
                lo, hi = mask.footprint(b0, min(b0 + nb, bh), r0, min(r0 + qb, lq))
                if (hi - lo + 1) * 4 + be.offset_align > be.binding_limit:
                    return False
        return True
    if lq * width <= cap:
        nb = min(bh, cap // (lq * width))
        while nb > 1 and not fits(nb, lq):
            nb = (nb + 1) // 2
        if fits(nb, lq):
            return nb, lq
    if mode != "scores" or width > cap:
        return None
    qb = min(lq, cap // width)
    while qb > 1 and not fits(1, qb):
        qb = (qb + 1) // 2
    return (1, qb) if fits(1, qb) else None


def _row_layout(n: int) -> tuple[int, int]:
    """(threads a row, rows a workgroup) for rows of n elements: about 4 elements a thread."""
    t = 32
    while t < WG and t * 4 < n:
        t *= 2
    return t, WG // t


class Drop:
    """Attention dropout on the score path (the op's `dropout`, Philox key and word offset; `base`: the step's
    stream position storage, or None; int64: the device multiplies in 64 bits): the forward's P and the
    backward's recomputed P draw the keep factors of kernels/attention.wgsl:drop_word, the flash kernels' mask."""

    def __init__(self, p: float, offset: int, key, base: Storage | None, int64: bool = False) -> None:
        self.p, self.r, self.offset, self.base = p, 1.0 / (1.0 - p), int(offset), base
        self.key = tuple(int(x) & 0xFFFFFFFF for x in key)
        self.int64 = bool(int64)

    @classmethod
    def of(cls, v, base: Storage | None, int64: bool = False) -> "Drop | None":
        p = float(v.attrs.get("dropout", 0.0))
        return cls(p, v.attrs["offset"], v.attrs["key"], base, int64) if p else None

    @staticmethod
    def bindings(drop: "Drop | None") -> list:
        """The storages a row kernel that draws binds after its mask: the step's stream position, if any."""
        return [drop.base] if drop is not None and drop.base is not None else []

    def words(self) -> tuple:
        """(offset lo, hi, key 0, key 1): the row kernels' dctr, the epilogues' eph[0]."""
        return (self.offset & 0xFFFFFFFF, (self.offset >> 32) & 0xFFFFFFFF) + self.key


def _kernel(section: str, t: int, rpw: int, causal: bool, masked: bool, drop: Drop | None = None) -> tuple[str, str]:
    """(key, WGSL) of a row kernel; `delta` is the dscores section's first half (its ONLY_DELTA flag). With
    dropout, fwd and probs draw keep factors (binding the stream position after the mask, if based);
    dscores only reads them from P's sign."""
    on = drop is not None and section != "delta"
    based = on and drop.base is not None and section != "dscores"
    i64 = on and drop.int64
    src = render("attention_scores", "dscores" if section == "delta" else section,
                 flags={"MASK": masked, "ONLY_DELTA": section == "delta", "DROP": on, "BASED": based, "INT64": i64},
                 T=t, RPW=rpw, CAUSAL=str(causal).lower(), MASK_BINDING=3, BASE_BINDING=3 + masked,
                 REACH=BAND_REACH)
    return (f"attention_scores:{section}:T={t}:RPW={rpw}:causal={causal}:mask={masked}:drop={on}:based={based}"
            f":i64={i64}"), src


def _mm(be, a: Storage, b: Storage, c: Storage, ta: bool = False, tb: bool = False, band: tuple = (0, 0),
        acc: bool = False, epi: "_RowEpi | None" = None) -> bool:
    """c = a @ b over the batch of heads (acc: c += a @ b); band (BAND_*, causal offset) skips what causality
    zeroes (0: none); epi: the product goes through that epilogue. False where the epilogue cannot run
    (matmul.py: K blocks), having launched nothing. A product of one head over at least SPLIT_MIN_K keys or
    rows into a narrow [rows, head size] result runs K-split (ONE_HEAD_SPLIT)."""
    attrs = {"trans_a": ta, "trans_b": tb, "band": band, "acc": acc}
    mixed = a.dtype != c.dtype              # f16 operands into f32 (the matrix units' products): never split
    if mixed:
        attrs["c_dtype"] = c.dtype
    k = a.shape[-2] if ta else a.shape[-1]
    if (not mixed and k >= SPLIT_MIN_K and c.shape[-1] < 128 and not epi
            and settings.flag("SCELLIS_ATTENTION_SPLIT")):
        if c.shape[0] == 1:
            attrs["split"] = ONE_HEAD_SPLIT
        elif band[0] in (BAND_KEND, BAND_KBEG):     # causal: head by head, each split
            for h in range(c.shape[0]):
                _mm(be, _head(a, h), _head(b, h), _head(c, h), ta, tb, band, acc)
            return True
    return _matmul(be, SimpleNamespace(dtype=a.dtype, shape=c.shape, attrs=attrs), [a, b], c, epi=epi) is not False


def _head(s: Storage, h: int) -> Storage:
    """Head h of a contiguous [heads, rows, width] f32 view, as [1, rows, width]."""
    return _rows(s, h, h + 1, 0, s.shape[1], s.shape[1], s.shape[2])


@functools.lru_cache(maxsize=None)
def _epi_source(section: str, causal: bool, n: int, first: int, drop: bool, based: bool, int64: bool) -> tuple:
    text = snippet("attention_scores", section, flags={"DROP": drop, "BASED": based, "INT64": int64},
                   CAUSAL=str(causal).lower(),
                   BINDINGS=bindings(*((f"x{k}", "f32") for k in range(n)), first=first),
                   NI=n, BASE_BINDING=first + n)
    return text, (n + 2 * drop, 1 + drop), "", hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


class _RowEpi(Epilogue):
    """A score product's store through a row kernel's arithmetic (kernels/attention_scores.wgsl epi_probs,
    epi_dscores): the backward without a mask computes P and dS in the matmuls that make S and dP, saving
    a read and a write of every score. ins: (binding, element offset, strides over the product's
    [heads, rows, keys]) per input; en carries the scale and each matmul chunk's causal offset. drop: the
    dropout (epi_probs draws keep factors, epi_dscores reads them from P's sign); `fr0` then is the flat
    query row (head * Lq + i) of the product's first row and `lq` the op's query length, which two index
    entries past the inputs turn into each element's stream word."""

    def __init__(self, section: str, causal: bool, scale: float, coff: int, ins: list,
                 drop: Drop | None = None, fr0: int = 0, lq: int = 0, lk: int = 0) -> None:
        self.section, self.causal, self.scale, self.coff = section, causal, scale, coff
        self.wins = [w for w, _, _ in ins]
        self.offs = [o for _, o, _ in ins]
        self.strides = [st for _, _, st in ins]
        self.draws = []
        self.n, self.drop, self.lk = len(ins), drop, lk
        self.based = drop is not None and drop.base is not None and section == "epi_probs"
        if drop is not None:            # index entries: flat query row, key
            self.offs += [fr0, 0]
            self.strides += [(lq, 1, 0), (0, 0, 1)]
            if self.based:
                self.wins.append(drop.base)

    def source(self, first: int) -> tuple:
        return _epi_source(self.section, self.causal, self.n, first, self.drop is not None, self.based,
                           self.drop is not None and self.drop.int64)

    def params(self, bstart, bstrides, tails, m0: int, n0: int, ncols: int) -> bytes:
        body = super().params(bstart, bstrides, tails, m0, n0, ncols)
        head = struct.pack("<Ifi4x", ncols, self.scale, self.coff + m0 - n0)
        if self.drop is None:
            return head + body[16:]
        d = self.drop
        eph = struct.pack("<4I2f2I", *d.words(), d.p, d.r, self.lk, 0)
        return head + body[16:-16] + eph


def _rows(s: Storage, b0: int, b1: int, r0: int, r1: int, rows: int, width: int) -> Storage:
    """Rows r0..r1 of heads b0..b1 of a contiguous [BH, rows, width] f32 (or f16) tensor as a [b1 - b0, r1 - r0,
    width] view (contiguous: whole heads, or a block of rows of one head)."""
    assert (r0, r1) == (0, rows) or b1 - b0 == 1
    isz = 2 if s.dtype == "f16" else 4
    return s.sub((b0 * rows + r0) * width * isz, (b1 - b0, r1 - r0, width), s.dtype,
                 (b1 - b0) * (r1 - r0) * width * isz)


def _win(s: Storage, b0: int, b1: int, r0: int, r1: int, rows: int, width: int = 1) -> tuple[Storage, int]:
    """The aligned binding over rows r0..r1 of heads b0..b1 (width elements a row) of s, and the element
    offset in it."""
    return window(s, 0, (b0 * rows + r0) * width, ((b1 - 1) * rows + r1) * width - 1, 4, s.backend.offset_align)


def _params(n, rows, lk, coff, scale, offs, mparams, b0: int, dv: int = 0, drop: Drop | None = None,
            lq: int = 0, r0: int = 0) -> bytes:
    """The row kernels' Params (kernels/attention_scores.wgsl): n heads of `rows` query rows, coff the causal
    offset of the chunk's first row (Lk - Lq + r0); offs: (scores, lse or P, dout, out); with dropout its
    words, (p, 1 / (1 - p)), the op's Lq and the chunk's first query row r0."""
    moff, msq, msk, mrank, mshape, mstride = mparams
    dw, dp = (drop.words(), (drop.p, drop.r)) if drop is not None else ((0, 0, 0, 0), (0.0, 1.0))
    return struct.pack("<IIIiIIIIfIIIIIII4I4I4I4f4I", n * rows, rows, lk, coff, *offs, scale, NEG_INF,
                       moff, b0, msq, msk, mrank, dv, *mshape, *mstride, *dw, *dp, 0.0, 0.0, lq, r0, 0, 0)


def _mask_bind(mask, b0: int, b1: int, r0: int, r1: int, al: int) -> tuple[list, tuple]:
    """The mask's binding over the chunk and its params; the kernels count rows from the chunk's first
    query row r0, so the window's base moves back by r0 rows."""
    if mask is None:
        return [], (0, 0, 0, 0, [1, 1, 1, 1], [0, 0, 0, 0])
    lo, hi = mask.footprint(b0, b1, r0, r1)
    wm, mo = window(mask.m, 0, lo, hi, 4, al)
    return [wm], mask.params(mo, lo - r0 * mask.sq)


def _bands(causal: bool, coff: int) -> tuple[tuple, tuple, tuple]:
    """The (score tiles, k end, k begin) bands of a causal product whose first query row may see keys up to
    coff: tiles of S or dP wholly past the diagonal are not computed (the row kernels never read them), P v
    and dS k stop at each row's last key, P^T dout and dS^T q start at each key's first row."""
    if not causal:
        return (0, 0), (0, 0), (0, 0)
    return (BAND_TILES, coff), (BAND_KEND, coff), (BAND_KBEG, coff)


def _chunks(bh: int, lq: int, chunk: tuple[int, int]):
    """(b0, b1, r0, r1) of every chunk: heads by nb, each head's query rows by qb."""
    nb, qb = chunk
    for b0 in range(0, bh, nb):
        for r0 in range(0, lq, qb):
            yield b0, min(bh, b0 + nb), r0, min(lq, r0 + qb)


def f32_scratch(be, name: str, shape) -> Storage:
    """A contiguous f32 tensor of `shape` in the backend's scratch buffer `name` (scores, deltas, f32 copies)."""
    nbytes = max(4, math.prod(shape) * 4)
    return Storage(be, be.scratch(name, nbytes), 0, tuple(shape), "f32", nbytes)


def cast_into(be, src: Storage, dst: Storage) -> None:
    """dst = src in dst's dtype (the cast op's kernel): f16 operands widened for the score path, its f32
    results rounded back once."""
    LAUNCHERS["cast"](be, SimpleNamespace(op="cast", dtype=dst.dtype, shape=tuple(dst.shape), attrs={}), [src], dst)


def halved(be, s: Storage) -> Storage:
    """f32 scores (P or dS) rounded to f16 in scratch `attention-half`, as the matrix units' operand of the next
    products (f16 operands, f32 sums: FlashAttention's rounding of P and dS, within the tier's tolerance)."""
    nbytes = max(4, math.prod(s.shape) * 2)
    h = Storage(be, be.scratch("attention-half", nbytes), 0, tuple(s.shape), "f16", nbytes)
    cast_into(be, s, h)
    return h


def widened(be, name: str, s: Storage) -> Storage:
    """f16 operand `s` as f32 in scratch `name` (the score path computes in f32)."""
    w = f32_scratch(be, name, s.shape)
    cast_into(be, s, w)
    return w


def scores_fwd(be, q, k, val, o, lse, mask, causal: bool, scale: float, dims: tuple, chunk: tuple,
               drop: Drop | None = None, half: bool = False) -> None:
    """out and lse of attention over chunks (heads, query rows) = `chunk` (dims: bh, lq, lk, d, dv); with
    dropout, out = (P z) v, z the keep factors (lse stays that of P). `half`: q, k, v are f16 and the products
    run on the matrix units (f16 operands, f32 S and out), P rounded to f16 for P v."""
    bh, lq, lk, d, dv = dims
    t, rpw = _row_layout(lk)
    key, src = _kernel("fwd", t, rpw, causal, mask is not None, drop)
    based = Drop.bindings(drop)
    for b0, b1, r0, r1 in _chunks(bh, lq, chunk):
        n, rows, coff = b1 - b0, r1 - r0, lk - lq + r0
        tiles, kend, _ = _bands(causal, coff)
        s = f32_scratch(be, "attention-scores", (n, rows, lk))
        _mm(be, _rows(q, b0, b1, r0, r1, lq, d), _rows(k, b0, b1, 0, lk, lk, d), s, tb=True, band=tiles)
        wl, lo = _win(lse, b0, b1, r0, r1, lq)
        ms, mp = _mask_bind(mask, b0, b1, r0, r1, be.offset_align)
        be.launch(key, src, [s, wl] + ms + based,
                  _params(n, rows, lk, coff, scale, (0, lo, 0, 0), mp, b0, drop=drop, lq=lq, r0=r0),
                  -(-n * rows // rpw))
        _mm(be, halved(be, s) if half else s, _rows(val, b0, b1, 0, lk, lk, dv), _rows(o, b0, b1, r0, r1, lq, dv),
            band=kend)


def scores_bwd(be, q, k, val, o, lse, dout, grads, mask, causal: bool, scale: float, dims: tuple,
               chunk: tuple, drop: Drop | None = None, half: tuple | None = None) -> None:
    """dq, dk, dv (grads) of attention over chunks (heads, query rows) = `chunk`, recomputing P from lse; a
    head's dk and dv add up over its query blocks, in block order. With dropout the recomputed P carries
    each keep bit in its sign, and the dS step leaves P z in its place for dv = (P z)^T dout, which
    therefore runs after it. `half` = (out, dout) in f32 for the row kernels: q, k, v, dout are f16 and the
    products run on the matrix units (f16 operands, f32 results), P and dS rounded to f16 as operands."""
    bh, lq, lk, d, dv = dims
    dq, dk, dvv = grads
    t, rpw = _row_layout(lk)
    kp, sp = _kernel("probs", t, rpw, causal, mask is not None, drop)
    td, rd = _row_layout(max(lk, dv))
    kd, sd = _kernel("dscores", td, rd, causal, False, drop)
    tr, rr = _row_layout(dv)
    kr, sr = _kernel("delta", tr, rr, causal, False)
    nomask = (0, 0, 0, 0, [1, 1, 1, 1], [0, 0, 0, 0])
    based = Drop.bindings(drop)
    fuse = mask is None and half is None and settings.flag("SCELLIS_ATTENTION_FUSE")
    o_rows, dout_rows = half or (o, dout)       # what the row kernels read (f32)
    for b0, b1, r0, r1 in _chunks(bh, lq, chunk):
        n, rows, coff, acc = b1 - b0, r1 - r0, lk - lq + r0, r0 > 0
        tiles, kend, kbeg = _bands(causal, coff)
        s = f32_scratch(be, "attention-scores", (n, rows, lk))
        dp = f32_scratch(be, "attention-dscores", (n, rows, lk))
        qh, kh, vh, doh = (_rows(q, b0, b1, r0, r1, lq, d), _rows(k, b0, b1, 0, lk, lk, d),
                           _rows(val, b0, b1, 0, lk, lk, dv), _rows(dout, b0, b1, r0, r1, lq, dv))
        wl, lo = _win(lse, b0, b1, r0, r1, lq)
        per_row, per_score = (rows, 1, 0), (rows * lk, lk, 1)
        epi_drop = dict(drop=drop, fr0=b0 * lq + r0, lq=lq, lk=lk)
        if not (fuse and _mm(be, qh, kh, s, tb=True, band=tiles,
                             epi=_RowEpi("epi_probs", causal, scale, coff, [(wl, lo, per_row)], **epi_drop))):
            _mm(be, qh, kh, s, tb=True, band=tiles)
            ms, mp = _mask_bind(mask, b0, b1, r0, r1, be.offset_align)
            be.launch(kp, sp, [s, wl] + ms + based,
                      _params(n, rows, lk, coff, scale, (0, lo, 0, 0), mp, b0, drop=drop, lq=lq, r0=r0),
                      -(-n * rows // rpw))
        wd, do_ = _win(dout_rows, b0, b1, r0, r1, lq, dv)
        wo, oo = _win(o_rows, b0, b1, r0, r1, lq, dv)
        if fuse:
            delta = f32_scratch(be, "attention-delta", (n, rows))
            be.launch(kr, sr, [delta, wd, wo], _params(n, rows, lk, coff, scale, (0, 0, do_, oo), nomask, b0, dv),
                      -(-n * rows // rr))
        if not (fuse and _mm(be, doh, vh, dp, tb=True, band=tiles,
                             epi=_RowEpi("epi_dscores", causal, scale, coff, [(s, 0, per_score), (delta, 0, per_row)],
                                         **epi_drop))):
            _mm(be, doh, vh, dp, tb=True, band=tiles)
            be.launch(kd, sd, [dp, s, wd, wo],
                      _params(n, rows, lk, coff, scale, (0, 0, do_, oo), nomask, b0, dv, drop=drop),
                      -(-n * rows // rd))
        _mm(be, halved(be, s) if half else s, doh, _rows(dvv, b0, b1, 0, lk, lk, dv), ta=True, band=kbeg, acc=acc)
        ds = halved(be, dp) if half else dp
        _mm(be, ds, kh, _rows(dq, b0, b1, r0, r1, lq, d), band=kend)
        _mm(be, ds, qh, _rows(dk, b0, b1, 0, lk, lk, d), ta=True, band=kbeg, acc=acc)
