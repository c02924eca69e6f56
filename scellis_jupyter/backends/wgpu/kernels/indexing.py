"""gather and scatter_add on wgpu (kernels/indexing.wgsl): one thread per output element, no atomics.

gather: out[c] = x[c with c[axis] = idx[c]] (torch.gather; out shape = index shape).
scatter_add: out = base, plus, for every output element, the src entries whose index along the axis
points at it, added in increasing index position (the order of numpy's np.add.at), rounding to the
output dtype after every add: bit-identical with the reference for f32, f16 and i32.
Under the prod and fast tiers a long axis with few outputs (an embedding's gradient: 96 x 384 outputs
over 16384 positions) is cut into pieces: stage 1 sums each piece's matches in position order, stage 2
adds the pieces to base in piece order. Fixed order, so still deterministic run to run, but not the
reference's order (f16 outputs round once per piece); debug keeps the one-stage kernel.

Out-of-range indices (honest limits): the reference raises KernelError; the device kernels cannot report
back without a readback, so on wgpu a gather index is CLAMPED to [0, size - 1] and a scatter_add entry
with an out-of-range index is DROPPED (it matches no output element). With SCELLIS_CHECK_INDICES=1 the
launcher checks index tensors host-side when they are leaves (their own buffers, not arena values
computed inside the program) and raises KernelError like the reference; this costs one readback (a
queue flush) per launch, so it is off by default. Indices computed inside the program are never checked.

Splitting: the output (and for gather the index) is processed in flat chunks that fit the binding
limit; x (gather) and index/src (scatter_add) are bound whole and must fit it (KernelError otherwise).
"""
from __future__ import annotations

import math

from .... import settings
from ....errors import DTypeError, KernelError
from ..templates import WGSL_TYPE, bindings, enable_f16, render, snippet
from .registry import launcher
from ...storage import Storage
from .reduce import pack_words
from .strided import contiguous_strides, window
from .elementwise import copy

MAXR = 8


def _check_host(be, op, idx, size):
    if not settings.flag("SCELLIS_CHECK_INDICES"):
        return
    if idx.buffer is be._arena or idx.buffer is be._arena2 or math.prod(idx.shape) == 0:
        return      # computed inside this program: not readable before the program runs
    a = be.to_numpy(idx)
    if a.min() < 0 or a.max() >= size:
        bad = a[(a < 0) | (a >= size)].flat[0]
        raise KernelError(f"index {int(bad)} is out of range for an axis of size {size}", where=f"op '{op}'")


def _whole(be, s, op):
    nb = max(s.nbytes, 4)
    if (nb + 3) // 4 * 4 > be.binding_limit:
        raise KernelError(f"a {op} operand of {s.nbytes} bytes exceeds the binding limit {be.binding_limit}",
                          where=f"op '{op}'", hint="split the tensor along another axis first")
    return s


def _chunks(be, n, isz):
    step = max(1, (be.binding_limit - be.offset_align) // isz)
    s = 0
    while s < n:
        m = min(step, n - s)
        yield s, m
        s += m


@launcher("gather")
def _gather(be, v, ins, out):
    x, idx = ins
    ax = v.attrs["axis"]
    n = math.prod(idx.shape)
    if n == 0:
        return
    if "i8" in (x.dtype,):
        raise DTypeError("i8 tensors support only casts on wgpu", where="op 'gather'", hint="cast to f32 first")
    size = x.shape[ax]
    if size == 0:
        raise KernelError(f"gather from an empty axis of {tuple(x.shape)}", where="op 'gather'")
    _check_host(be, "gather", idx, size)
    rank = len(idx.shape)
    if rank > MAXR:
        raise KernelError(f"rank {rank} exceeds {MAXR}", where="op 'gather'")
    d = v.dtype
    isz = 2 if d == "f16" else 4
    src = render("indexing", ENABLE=enable_f16(d), BODY=snippet("indexing", "gather"),
                 BINDINGS=bindings(("out", d), ("idx", "i32"), ("x", d)))
    wx = _whole(be, x, "gather")
    xst = contiguous_strides(x.shape)
    for s, m in _chunks(be, n, 4):
        wo, oo = window(out, 0, s, s + m - 1, isz, be.offset_align)
        wi, io = window(idx, 0, s, s + m - 1, 4, be.offset_align)
        words = ([m, s, rank, ax, size, oo, io, 0] + list(idx.shape) + [1] * (MAXR - rank)
                 + list(xst) + [0] * (MAXR - rank))
        be.launch(f"gather:{d}", src, [wo, wi, wx], pack_words(words, 36), (m + 63) // 64)


@launcher("scatter_add")
def _scatter_add(be, v, ins, out):
    base, idx, srcs = ins
    ax = v.attrs["axis"]
    n = math.prod(base.shape)
    if n == 0:
        return
    d = v.dtype
    if d == "i8":
        raise DTypeError("i8 tensors support only casts on wgpu", where="op 'scatter_add'", hint="cast to f32 first")
    rank = len(base.shape)
    if rank > MAXR:
        raise KernelError(f"rank {rank} exceeds {MAXR}", where="op 'scatter_add'")
    if math.prod(idx.shape) == 0:
        st = contiguous_strides(base.shape)
        copy(be, "scatter_add", out, st, 0, base, st, 0, base.shape)
        return
    _check_host(be, "scatter_add", idx, base.shape[ax])
    isz = 2 if d == "f16" else 4
    ct = "f32" if d in ("f32", "f16") else "i32" if d == "i32" else "u32"
    src = render("indexing", ENABLE=enable_f16(d), BODY=snippet("indexing", "scatter_add", T=WGSL_TYPE[d], C=ct),
                 BINDINGS=bindings(("out", d), ("base", d), ("idx", "i32"), ("src", d)))
    wi, ws = _whole(be, idx, "scatter_add"), _whole(be, srcs, "scatter_add")
    ist = contiguous_strides(idx.shape)
    for s, m in _chunks(be, n, isz):
        wo, oo = window(out, 0, s, s + m - 1, isz, be.offset_align)
        wb, bo = window(base, 0, s, s + m - 1, isz, be.offset_align)
        if oo != bo:
            raise KernelError("out and base windows disagree", where="op 'scatter_add'", hint="engine bug")
        words = ([m, s, rank, ax, base.shape[ax], oo, 0, 0] + list(base.shape) + [1] * (MAXR - rank)
                 + list(ist) + [0] * (MAXR - rank) + list(idx.shape) + [1] * (MAXR - rank))
        pieces = split_pieces(be, m, base.shape[ax], idx.shape[ax])
        if pieces > 1:
            _scatter_split(be, d, ct, words, m, pieces, -(-idx.shape[ax] // pieces), wo, wb, wi, ws)
            continue
        be.launch(f"scatter_add:{d}", src, [wo, wb, wi, ws], pack_words(words, 36), (m + 63) // 64)


SPLIT_MIN_AXIS = 1024     # positions along the axis before a split pays for its second stage
SPLIT_THREADS = 1 << 20   # about this many stage-1 threads: enough to fill a large GPU


def split_pieces(be, m: int, out_axis: int, n_axis: int) -> int:
    """Pieces of the index axis for a split scatter_add (1: one stage). Only off the debug tier, for long
    axes whose outputs alone leave most of a GPU idle, with the partials within one binding."""
    if getattr(be, "tier", None) not in ("prod", "fast") or n_axis < SPLIT_MIN_AXIS or m >= SPLIT_THREADS:
        return 1
    pieces = min(n_axis // 256, max(2, SPLIT_THREADS // max(m, 1)), 256)
    while pieces > 1 and m * pieces * 4 > be.binding_limit:
        pieces //= 2
    return max(pieces, 1)


def _scatter_split(be, d, ct, words, m, pieces, length, wo, wb, wi, ws) -> None:
    n = m * pieces
    scr = Storage(be, be.scratch("scatter-split", n * 4), 0, (n,), ct, n * 4)
    one = render("indexing", ENABLE=enable_f16(d), BODY=snippet("indexing", "scatter_add_part", T=WGSL_TYPE[d], C=ct),
                 BINDINGS=bindings(("out", ct), ("idx", "i32"), ("src", d)))
    w1 = [n] + words[1:32] + [m, length]
    be.launch(f"scatter_add_part:{d}", one, [scr, wi, ws], pack_words(w1, 36), (n + 63) // 64)
    two = render("indexing", ENABLE=enable_f16(d), BODY=snippet("indexing", "scatter_add_sum", T=WGSL_TYPE[d], C=ct),
                 BINDINGS=bindings(("out", d), ("base", d), ("src", ct)))
    w2 = list(words[:32]) + [m, pieces]
    be.launch(f"scatter_add_sum:{d}", two, [wo, wb, scr], pack_words(w2, 36), (m + 63) // 64)
