"""softmax / log_softmax along attrs['axis'] (kernels/softmax.wgsl): rows read once (REG: up to KREG_MAX
chunks an invocation kept in registers), else two reads of a row, one online pass.

Layout [outer, R, inner]: row (a, b) starts at a * R * inner + b and steps by inner. The pipeline is
picked per box when it is built: inner > 1 (columns) takes one invocation per row, folding in order
(neighbouring rows are neighbouring in memory); contiguous rows take a workgroup per long row or a
subgroup per short one (8 rows a workgroup), with vec4 loads when R and both bases are multiples of 4.
Subgroup merges are used when the device has `subgroup` (`be.subgroups`), else a fixed tree in
workgroup memory; both orders depend only on the shapes (and the subgroup size): deterministic, no
atomics. f16 inputs compute in f32. Splitting: the (outer, R, inner) box is halved over outer/inner
until the input and output bindings fit `be.binding_limit`; a single row (or, for inner > 1, one outer
slice's column) larger than the limit is refused with a KernelError.
"""
from __future__ import annotations

import math

from .... import settings
from ....errors import KernelError
from ..templates import WGSL_TYPE, enable_f16, render
from .registry import launcher
from .reduce import pack_words, row_threads, split_boxes
from .strided import footprint, window

WG = 256
SHORT_ROW = 128     # chunks (vec4 or scalar) a row of at most this many gets a subgroup, not a workgroup
RPW_SHORT = 8       # rows a workgroup takes in that case (one a subgroup at subgroup size 32)


def plan(R: int, inner: int, nrows: int, vec: bool, subgroups: bool) -> dict:
    """The kernel layout for rows of R elements: flags and sizes (what the pipeline specializes on)."""
    if inner > 1 and (inner >= 16 or R <= 256):
        return {"COL": True, "SG": False, "WGROW": False, "VEC": False, "WG": 64, "RPW": 1, "REG": False, "KREG": 1}
    chunks = R // 4 if vec else R
    short = chunks <= SHORT_ROW
    wg = WG if short else row_threads(chunks)
    # lanes a row gets: the workgroup (long rows), WG / RPW (short rows, no subgroups), or the run-time
    # subgroup size, where the kernel keeps KREG chunks for the smallest size it may be (SG_MIN_SIZE)
    lanes = wg if not short else (SG_MIN_SIZE if subgroups else wg // RPW_SHORT)
    kreg = (chunks + lanes - 1) // lanes
    return {"COL": False, "SG": subgroups, "WGROW": not short, "VEC": vec, "WG": wg,
            "RPW": RPW_SHORT if short else 1, "REG": kreg <= KREG_MAX and row_reg(), "KREG": min(kreg, KREG_MAX)}


def row_reg() -> bool:
    """The one-read register path only with SCELLIS_ROW_REG=on. Off by default: on the H200 (2026-12-03,
    benchmarks/kernels.py, same call) the two-read path was faster at every measured shape: softmax 983 /
    1673 / 977 GB/s against 797 / 1379 / 927, layer_norm 1244 / 1549 / 1733 against 1028 / 1364 / 970,
    rms_norm 1309 / 1522 / 1397 against 1007 / 1092 / 860 (8192x1024 / 4096x4096 / 65536x256): holding up
    to KREG_MAX vec4 a thread costs more occupancy than the second read of a row that is still in cache."""
    return settings.flag("SCELLIS_ROW_REG")


KREG_MAX = 16       # chunks an invocation keeps in registers for the one-read path (16 vec4: 64 floats)
SG_MIN_SIZE = 8     # the smallest subgroup size sized for (llvmpipe 8, NVIDIA 32): larger ones keep fewer



@launcher("softmax", "log_softmax")
def _softmax(be, v, ins, out):
    (x,) = ins
    ax = v.attrs["axis"]
    shape = tuple(x.shape)
    if math.prod(shape) == 0:
        return
    outer, R, inner = math.prod(shape[:ax]), shape[ax], math.prod(shape[ax + 1:])
    d = v.dtype
    isz = 2 if d == "f16" else 4
    st = (R * inner, inner, 1)
    ops = [(0, st, isz), (0, st, isz)]
    sg = bool(getattr(be, "subgroups", False))

    def order(sizes):
        cand = [i for i in (0, 2) if sizes[i] > 1]
        return max(cand, key=lambda i: sizes[i]) if cand else None

    try:
        boxes = list(split_boxes((outer, R, inner), ops, be.binding_limit, be.offset_align, order))
    except KernelError:
        raise KernelError(f"one softmax row of {R} elements exceeds the binding limit {be.binding_limit}",
                          where=f"op '{v.op}'", hint="raise SCELLIS_MAX_BINDING_BYTES or reshape") from None
    for starts, sizes in boxes:
        lo, hi = footprint(starts, sizes, st)
        wo, oo = window(out, 0, lo, hi, isz, be.offset_align)
        wx, xo = window(x, 0, lo, hi, isz, be.offset_align)
        nrows = sizes[0] * sizes[2]
        vec = inner == 1 and R % 4 == 0 and xo % 4 == 0 and oo % 4 == 0
        k = plan(R, inner, nrows, vec, sg)
        q = 4 if k["VEC"] else 1
        t = WGSL_TYPE[d]
        src = render("softmax", flags={"LOG": v.op == "log_softmax", "COL": k["COL"], "SG": k["SG"],
                                       "WGROW": k["WGROW"], "VEC": k["VEC"], "REG": k["REG"]},
                     ENABLE=enable_f16(d), T=t, WG=k["WG"], RPW=k["RPW"], KREG=k["KREG"])
        key = "softmax:{}:{}:".format(v.op, d) + ":".join(f"{n}={k[n]}" for n in sorted(k))
        words = [nrows, R // q, sizes[2], R * inner // q, inner, xo // q, oo // q, 0]
        if k["COL"]:
            groups = (nrows + k["WG"] - 1) // k["WG"]
        else:
            groups = (nrows + k["RPW"] - 1) // k["RPW"]
        be.launch(key, src, [wo, wx], pack_words(words, 16), groups)
