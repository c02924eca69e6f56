"""reduce_sum / reduce_max: one workgroup per output with a fixed-order tree (kernels/reduce.wgsl).

Layout: the input is contiguous; size-1 dims are dropped and adjacent reduced (or kept) dims merged,
leaving up to 8 kept and 8 reduced (size, stride) pairs, so any set of axes is one dispatch where each
output walks its reduced sub-box by an index decomposition (no scratch, no transposes).
Determinism: each thread folds its r = lid, lid + WG, ... in increasing order, then a tree of fixed
shape in workgroup memory; no atomics, so the bits depend only on the shapes (and the binding limit).
Small reduced extents (R <= 16) use one thread per output folding r = 0 .. R-1 instead. With subgroups
(`be.subgroups`, chosen when the pipeline is built) a workgroup row combines its subgroups' values in
order, and reduced boxes of at most SUBROW_MAX take a subgroup an output. Few outputs of long boxes
(split_pieces) reduce in two stages through a scratch row: fixed pieces, then that row, in order.
Accumulation: f32 for f32/f16 inputs (f16 rounds once on store), i32 for integer sums (wrapping).
Splitting: the (kept + reduced) box is halved until every binding fits `be.binding_limit`, kept dims
first; only when one output's reduced box alone does not fit are reduced dims split, and the partial
results are combined into the output in a fixed (depth-first, low half first) order through the
kernel's accumulate flag. An f16 output then rounds once per partial (documented loss).
Columns (`is_column`: the innermost kept dim is contiguous, as for bias and norm-weight gradients, sums
over leading axes): adjacent invocations take adjacent outputs, a workgroup COLS outputs x SLICES row
slices, each slice folding its rows in order and slice 0 combining the slices in order; long columns
of few blocks run in two stages (`col_pieces` row chunks into a scratch row, then that row reduced over
its pieces in increasing order by the same layout). Fixed order, no atomics.
Empty reductions: sum = 0 (a fill); max over an empty axis is refused at graph build.
"""
from __future__ import annotations

import math
import struct

from .... import settings
from ....errors import DTypeError, KernelError
from ..templates import WGSL_TYPE, enable_f16, render, snippet
from .registry import launcher
from ...storage import Storage
from .strided import box_chunks, contiguous_strides, footprint, window
from .elementwise import fill

MAXR = 8


def row_threads(chunks: int) -> int:
    """Invocations a workgroup gets for one row of `chunks` loads: about four each (four loads in flight
    per invocation), from 64 to 256."""
    wg = 64
    while wg < 256 and wg * 8 <= chunks:
        wg *= 2
    return wg


def pack_words(words, n: int) -> bytes:
    words = [int(w) & 0xFFFFFFFF for w in words]
    words += [0] * (n - len(words))
    return struct.pack(f"<{n}I", *words)


def split_boxes(shape, operands, limit: int, align: int, order):
    """strided.box_chunks with a caller-given split priority `order(sizes) -> dim or None`."""
    return box_chunks(shape, operands, limit, align, order)


def kept_first(nkept: int, x_strides=None):
    """Split priority: the dim spanning most of the input's bytes first (halving it shrinks the bound
    window the most), kept dims before reduced ones on ties, so an output row is reduced in one
    dispatch unless its own span is what overflows the binding."""
    def order(sizes):
        cand = [i for i in range(len(sizes)) if sizes[i] > 1]
        if not cand:
            return None
        if x_strides is None:
            return max(cand, key=lambda i: (i < nkept, sizes[i]))
        return max(cand, key=lambda i: ((sizes[i] - 1) * x_strides[i], i < nkept, sizes[i]))
    return order


def canon_reduce(shape, axes):
    """(kept [(size, stride)], reduced [(size, stride)]) with size-1 dims dropped, runs merged."""
    st = contiguous_strides(shape)
    kept, red = [], []
    prev = None
    for i, s in enumerate(shape):
        if s == 1:
            continue
        cls = i in axes
        grp = red if cls else kept
        if prev == cls and grp and grp[-1][1] == st[i] * s:
            grp[-1] = (grp[-1][0] * s, st[i])
        else:
            grp.append((s, st[i]))
        prev = cls
    return kept, red


def _types(op, xd, od):
    if xd in ("f32", "f16"):
        ct = "f32"
    elif xd in ("i32",):
        ct = "i32"
    elif xd in ("u32", "bool") and op == "reduce_max":
        ct = "u32"
    else:
        raise DTypeError(f"{op} of {xd} is not supported on wgpu", where=f"op '{op}'", hint="cast to f32 or i32")
    if op == "reduce_sum":
        comb, init = snippet("reduce", "comb.sum"), snippet("reduce", "init.sum", CT=ct)
    else:
        comb = snippet("reduce", "comb.max_float" if ct == "f32" else "comb.max_int")
        init = snippet("reduce", f"init.max_{ct}")
    return ct, comb, init


@launcher("reduce_sum", "reduce_max")
def _reduce(be, v, ins, out):
    (x,) = ins
    axes = set(v.attrs["axes"])
    od, xd = v.dtype, x.dtype
    if "i8" in (od, xd):
        raise DTypeError("i8 tensors support only casts on wgpu", where=f"op '{v.op}'", hint="cast to f32 first")
    nout = math.prod(v.shape)
    if nout == 0:
        return
    if math.prod(x.shape) == 0:         # empty reduced box: the sum is 0
        fill(be, out, 0)
        return
    kept, red = canon_reduce(tuple(x.shape), axes)
    if len(kept) > MAXR or len(red) > MAXR:
        raise KernelError(f"more than {MAXR} separate kept or reduced dim groups", where=f"op '{v.op}'")
    ct, comb, init = _types(v.op, xd, od)
    kshape = [s for s, _ in kept]
    ost = contiguous_strides(kshape)
    shape = kshape + [s for s, _ in red]
    nk = len(kept)
    x_st = [t for _, t in kept] + [t for _, t in red]
    o_st = list(ost) + [0] * len(red)
    isz_x, isz_o = (2 if xd == "f16" else 4), (2 if od == "f16" else 4)
    sg = bool(getattr(be, "subgroups", False))
    if not shape:
        shape, x_st, o_st, nk = [1], [1], [1], 1
    ops = [(0, o_st, isz_o), (0, x_st, isz_x)]
    boxes = list(split_boxes(shape, ops, be.binding_limit, be.offset_align, kept_first(nk, x_st)))
    for starts, sizes in boxes:
        wins, offs = [], []
        for s, (b, st, i) in zip((out, x), ops):
            lo, hi = footprint(starts, sizes, st)
            w, off = window(s, b, lo, hi, i, be.offset_align)
            wins.append(w)
            offs.append(off)
        ks, rs = list(sizes[:nk]), list(sizes[nk:])
        acc = 1 if any(starts[nk:]) else 0
        n_o, R = math.prod(ks), math.prod(rs)
        if is_column(ks, x_st[nk - 1] if nk else 0, R):
            _columns(be, v.op, od, xd, ct, comb, init, ks, rs, x_st[:nk], o_st[:nk], x_st[nk:], offs, wins,
                     acc, col_pieces(n_o, R) if len(boxes) == 1 else 1)
            continue
        pieces = split_pieces(n_o, R) if len(boxes) == 1 else 1
        if pieces > 1:
            # two stages: pieces partial results an output into a scratch row, then that row reduced
            scr = Storage(be, be.scratch("reduce-split", n_o * pieces * 4), 0, (n_o * pieces,), ct, n_o * pieces * 4)
            words = _words(n_o, R, ks, rs, x_st[:nk], contiguous_strides(ks), x_st[nk:], 0, offs[1], 0, pieces)
            _dispatch(be, v.op, ct, xd, ct, comb, init, words, [scr, wins[1]], n_o, R, sg, pieces)
            words = _words(n_o, pieces, ks, [pieces], [t * pieces for t in contiguous_strides(ks)], o_st[:nk],
                           [1], offs[0], 0, acc, 0)
            _dispatch(be, v.op, od, ct, ct, comb, init, words, [wins[0], scr], n_o, pieces, sg, 1)
            continue
        words = _words(n_o, R, ks, rs, x_st[:nk], o_st[:nk], x_st[nk:], offs[0], offs[1], acc, 0)
        _dispatch(be, v.op, od, xd, ct, comb, init, words, wins, n_o, R, sg, 1)


SPLIT_MIN_R = 65536     # reduced boxes at least this long, for few outputs, reduce in two stages
SPLIT_MAX_OUT = 256
SPLIT_CHUNK = 8192      # elements a workgroup of the first stage folds (about)


def split_pieces(n_o: int, R: int) -> int:
    """How many pieces the first stage cuts each output's reduced box into (1: one stage). Few outputs
    of long boxes would otherwise leave all but a few workgroups of a GPU idle."""
    if n_o > SPLIT_MAX_OUT or R < SPLIT_MIN_R:
        return 1
    return max(2, min(R // SPLIT_CHUNK, max(2, 4096 // n_o)))


def _words(n_o, R, ks, rs, kx, ko, rx, out_base, x_base, acc, pieces) -> bytes:
    words = ([n_o, R, len(ks), max(len(rs), 1), out_base, x_base, acc, pieces]
             + (list(ks) + [1] * MAXR)[:MAXR] + (list(kx) + [0] * MAXR)[:MAXR]
             + (list(ko) + [0] * MAXR)[:MAXR]
             + ((list(rs) or [1]) + [1] * MAXR)[:MAXR] + ((list(rx) or [0]) + [0] * MAXR)[:MAXR])
    return pack_words(words, 48)


COLS, SLICES = 64, 4      # column layout: adjacent outputs a workgroup x row slices folded apart
COL_MIN = 32              # the contiguous kept run at least this long takes the column layout
COL_ROWS = 256            # rows a piece of the column layout's first stage folds, at least
COL_TARGET = 2048         # workgroups the first stage aims at (an H200 has 132 SMs)


def is_column(ks, inner_stride: int, R: int) -> bool:
    """The kept run is contiguous (stride 1) and long enough to fill a column block, and the reduced
    box is not tiny (R <= 16 already takes one invocation an output, which coalesces the same way)."""
    return R > 16 and inner_stride == 1 and bool(ks) and ks[-1] >= COL_MIN


def col_pieces(n_o: int, R: int) -> int:
    """Row pieces of the column layout's first stage (1: one stage): enough workgroups to fill a GPU
    when few column blocks share long columns, each piece at least COL_ROWS rows."""
    nblk = (n_o + COLS - 1) // COLS
    if R < 2 * COL_ROWS or nblk >= COL_TARGET:
        return 1
    return max(1, min(R // COL_ROWS, (COL_TARGET + nblk - 1) // nblk))


def _col_dispatch(be, op, od, xd, ct, comb, init, words, wins, n_o, pieces) -> None:
    src = render("reduce", flags={"COL": True, "ROW": False, "SG": False, "SUBROW": False, "SPLIT": False},
                 ENABLE=enable_f16(od, xd), OT=WGSL_TYPE[od], XT=WGSL_TYPE[xd], CT=ct, COMB=comb, INIT=init,
                 WG=COLS * SLICES, SGCOMB="", RPW=SUBROW_RPW, COLS=COLS, SLICES=SLICES)
    key = f"reduce:{op}:{od}:{xd}:{COLS}x{SLICES}:COL=True"
    be.launch(key, src, wins, words, ((n_o + COLS - 1) // COLS) * pieces)


def _columns(be, op, od, xd, ct, comb, init, ks, rs, kx, ko, rx, offs, wins, acc, pieces) -> None:
    """The column layout: one stage, or `pieces` row chunks into a (pieces, n_o) scratch row that the
    same layout then reduces over its pieces in increasing order (fixed: the bits depend on shapes)."""
    n_o, R = math.prod(ks), math.prod(rs)
    if pieces == 1:
        words = _words(n_o, R, ks, rs, kx, ko, rx, offs[0], offs[1], acc, 1)
        _col_dispatch(be, op, od, xd, ct, comb, init, words, wins, n_o, 1)
        return
    n = n_o * pieces
    scr = Storage(be, be.scratch("reduce-col", n * 4), 0, (n,), ct, n * 4)
    words = _words(n_o, R, ks, rs, kx, [0] * len(ks), rx, 0, offs[1], 0, pieces)
    _col_dispatch(be, op, ct, xd, ct, comb, init, words, [scr, wins[1]], n_o, pieces)
    words = _words(n_o, pieces, ks, [pieces], contiguous_strides(ks), ko, [n_o], offs[0], 0, acc, 1)
    _col_dispatch(be, op, od, ct, ct, comb, init, words, [wins[0], scr], n_o, 1)


def _dispatch(be, op, od, xd, ct, comb, init, words, wins, n_o, R, sg, pieces) -> None:
    """One reduce dispatch: the layout from R (and the subgroup switch), its pipeline, its groups."""
    row = R > 16 or pieces > 1
    subrow = sg and row and pieces == 1 and R <= subrow_max()
    wg = 256 if (subrow or pieces > 1) else row_threads(R) if row else 64
    flags = {"ROW": row, "SG": sg and row, "SUBROW": subrow, "SPLIT": pieces > 1, "COL": False}
    sgcomb = ""
    if flags["SG"]:
        sgcomb = snippet("reduce", "sgcomb.sum" if op == "reduce_sum" else
                         "sgcomb.max_float" if ct == "f32" else "sgcomb.max_int")
    src = render("reduce", flags=flags, ENABLE=enable_f16(od, xd), OT=WGSL_TYPE[od], XT=WGSL_TYPE[xd],
                 CT=ct, COMB=comb, INIT=init, WG=wg, SGCOMB=sgcomb, RPW=SUBROW_RPW, COLS=COLS, SLICES=SLICES)
    key = f"reduce:{op}:{od}:{xd}:{wg}:" + ":".join(f"{k}={flags[k]}" for k in sorted(flags))
    if subrow:
        groups = (n_o + SUBROW_RPW - 1) // SUBROW_RPW
    elif row:
        groups = n_o * pieces
    else:
        groups = (n_o + wg - 1) // wg
    be.launch(key, src, wins, words, groups)


# with subgroups, reduced boxes up to this long get a subgroup an output (1024: on the H200, 2026-12-04,
# sum(-1) of 8192x1024 ran at 3504 GB/s against 1942 as a 256-thread workgroup a row; torch 2631-3480)
SUBROW_MAX = 1024
SUBROW_RPW = 8


def subrow_max() -> int:
    """SCELLIS_SUBROW_MAX: the longest reduced box that takes a subgroup an output (default SUBROW_MAX);
    for measuring the layouts on an adapter. The layout fixes the summation order, so results of boxes
    between the two lengths change bits (deterministically) with it."""
    return settings.number("SCELLIS_SUBROW_MAX", SUBROW_MAX)
