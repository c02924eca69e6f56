"""layer_norm / rms_norm over trailing dims (kernels/norm.wgsl): one kernel, one read of a row (REG: up
to KREG_MAX chunks an invocation kept in registers), else two. Their backward (layer_norm_bwd /
rms_norm_bwd: dx, and g * xhat with a weight) is one kernel too (kernels/norm_bwd.wgsl), same layouts.

Rows are contiguous (the normalized dims are trailing). Layout, picked per box when the pipeline is
built: a workgroup per long row, a subgroup per short one (8 rows a workgroup); subgroup sums when the
device has `subgroup` (`be.subgroups`), else a fixed tree in workgroup memory; vec4 loads when the row
length and every base are multiples of 4. Statistics in f32 (f16 rounds once on store); sums in a fixed
order: deterministic, no atomics. Splitting: rows are split until x and out fit `be.binding_limit`; a
single row larger than the limit is refused with a KernelError.
"""
from __future__ import annotations

import math
import struct

from .... import dtypes as dt
from ....errors import KernelError
from ....program.schedule import multi_offset
from ..templates import WGSL_TYPE, enable_f16, render
from .registry import launcher
from .softmax import row_reg
from .reduce import pack_words, row_threads, split_boxes
from .strided import footprint, window

WG = 256
SHORT_ROW = 128     # chunks a row of at most this many gets a subgroup (or LANES invocations), not a workgroup
RPW_SHORT = 8
KREG_MAX = 16       # chunks an invocation keeps in registers for the one-read path (REG)
SG_MIN_SIZE = 8     # the smallest subgroup size the subgroup-a-row layout is sized for (llvmpipe 8, NVIDIA 32)


def reg_chunks(chunks: int, wg: int, short: bool, subgroups: bool) -> int:
    """Chunks an invocation holds to read its row once: over the workgroup (long rows), WG / RPW lanes
    (short rows without subgroups) or the smallest subgroup size (short rows with them)."""
    lanes = wg if not short else (SG_MIN_SIZE if subgroups else wg // RPW_SHORT)
    return (chunks + lanes - 1) // lanes


def _row_shape(x, attrs) -> tuple[int, int]:
    """(row length, rows) of a norm's input: the trailing attrs['n_axes'] dims are a row."""
    shape = tuple(x.shape)
    k = int(attrs["n_axes"])
    return math.prod(shape[len(shape) - k:]), math.prod(shape[:len(shape) - k])


def _row_boxes(be, op: str, rows: int, n: int, n_rows: int, n_vectors: int, isz: int) -> list:
    """(starts, sizes) boxes over [rows, n] so that `n_rows` row-shaped operands and `n_vectors` operands of
    one row's length fit the binding limit, split over rows only; one row that does not fit is refused."""
    ops = [(0, (n, 1), isz)] * n_rows + [(0, (0, 1), isz)] * n_vectors
    try:
        return list(split_boxes((rows, n), ops, be.binding_limit, be.offset_align,
                                lambda sizes: 0 if sizes[0] > 1 else None))
    except KernelError:
        raise KernelError(f"one {op} row of {n} elements exceeds the binding limit {be.binding_limit}",
                          where=f"op '{op}'", hint="raise SCELLIS_MAX_BINDING_BYTES or reshape") from None


@launcher("layer_norm", "rms_norm")
def _norm(be, v, ins, out):
    x = ins[0]
    a = v.attrs
    n, rows = _row_shape(x, a)
    if n == 0 or rows == 0:
        return
    d = v.dtype
    isz = 2 if d == "f16" else 4
    has_w, has_b = bool(a.get("has_w")), bool(a.get("has_b"))
    affine = list(ins[1:])
    st_rows = (n, 1)
    boxes = _row_boxes(be, v.op, rows, n, 2, len(affine), isz)
    sg = bool(getattr(be, "subgroups", False))
    eps_bits = struct.unpack("<I", struct.pack("<f", float(a["eps"])))[0]
    t = WGSL_TYPE[d]
    for starts, sizes in boxes:
        lo, hi = footprint(starts, sizes, st_rows)
        wo, oo = window(out, 0, lo, hi, isz, be.offset_align)
        wx, xo = window(x, 0, lo, hi, isz, be.offset_align)
        wins, offs = [wo, wx], [oo, xo]
        for s in affine:
            ws, so = window(s, 0, 0, n - 1, isz, be.offset_align)
            wins.append(ws)
            offs.append(so)
        vec = n % 4 == 0 and all(o % 4 == 0 for o in offs)
        q = 4 if vec else 1
        short = n // q <= SHORT_ROW
        rpw = RPW_SHORT if short else 1
        wg = WG if short else row_threads(n // q)
        kreg = reg_chunks(n // q, wg, short, sg)
        flags = {"RMS": v.op == "rms_norm", "W": has_w, "B": has_b, "SG": sg, "WGROW": not short, "VEC": vec,
                 "REG": kreg <= KREG_MAX and row_reg()}
        src = render("norm", flags=flags, ENABLE=enable_f16(d), T=t, WG=wg, RPW=rpw, BBIND=3 + has_w,
                     KREG=min(kreg, KREG_MAX))
        key = f"norm:{d}:{wg}:k{min(kreg, KREG_MAX)}:" + ":".join(f"{f}={flags[f]}" for f in sorted(flags))
        wb = [offs[2] // q if has_w else 0, offs[2 + has_w] // q if has_b else 0]
        words = [sizes[0], n // q, xo // q, oo // q] + wb + [eps_bits, 0]
        be.launch(key, src, wins, pack_words(words, 8), (sizes[0] + rpw - 1) // rpw)


@launcher("layer_norm_bwd", "rms_norm_bwd")
def _norm_bwd(be, v, ins, out):
    """dx (and g * xhat with a weight) of a layer_norm / rms_norm, a row at a time (kernels/norm_bwd.wgsl),
    with norm's layouts: split over rows until every binding fits; one row over the limit is refused."""
    x, g = ins[0], ins[1]
    a = v.attrs
    shape = tuple(x.shape)
    n, rows = _row_shape(x, a)
    if n == 0 or rows == 0:
        return
    has_w = bool(a.get("has_w"))
    d = x.dtype
    isz = 2 if d == "f16" else 4
    if has_w:
        dx = out.sub(0, shape, d, dt.nbytes(shape, d))
        gxh = out.sub(multi_offset(v.shape, v.dtype, 1), shape, d, dt.nbytes(shape, d))
        row_ops = [dx, x, g, gxh]
    else:
        dx = out
        row_ops = [dx, x, g]
    st_rows = (n, 1)
    boxes = _row_boxes(be, v.op, rows, n, len(row_ops), int(has_w), isz)
    sg = bool(getattr(be, "subgroups", False))
    eps_bits = struct.unpack("<I", struct.pack("<f", float(a["eps"])))[0]
    ww = [window(ins[2], 0, 0, n - 1, isz, be.offset_align)] if has_w else []    # the same for every box
    for starts, sizes in boxes:
        lo, hi = footprint(starts, sizes, st_rows)
        rw = [window(s, 0, lo, hi, isz, be.offset_align) for s in row_ops]
        offs = [o for _, o in rw + ww]
        vec = n % 4 == 0 and all(o % 4 == 0 for o in offs)
        q = 4 if vec else 1
        short = n // q <= SHORT_ROW
        rpw = RPW_SHORT if short else 1
        wg = WG if short else row_threads(n // q)
        flags = {"RMS": v.op == "rms_norm_bwd", "W": has_w, "SG": sg, "WGROW": not short, "VEC": vec}
        src = render("norm_bwd", flags=flags, ENABLE=enable_f16(d), T=WGSL_TYPE[d], WG=wg, RPW=rpw)
        key = f"norm_bwd:{d}:{wg}:" + ":".join(f"{f}={flags[f]}" for f in sorted(flags))
        (wdx, odx), (wx, ox), (wgr, og) = rw[:3]
        wins = [wdx, wx, wgr] + ([ww[0][0], rw[3][0]] if has_w else [])
        words = [sizes[0], n // q, ox // q, og // q, odx // q, ww[0][1] // q if has_w else 0,
                 rw[3][1] // q if has_w else 0, eps_bits]
        be.launch(key, src, wins, pack_words(words, 8), (sizes[0] + rpw - 1) // rpw)
