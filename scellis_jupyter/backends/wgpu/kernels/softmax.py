"""softmax / log_softmax along attrs['axis'] (kernels/softmax.wgsl): one workgroup per row.

Layout [outer, R, inner]: row (a, b) starts at a * R * inner + b and steps by inner. Each row does a
max tree, a sum-of-exp tree and a write pass, all in a fixed order (deterministic, no atomics); f16
inputs compute in f32. Splitting: the (outer, R, inner) box is halved over outer/inner until the input
and output bindings fit `be.binding_limit`. A row's footprint is R * inner elements, so a single row
(or, for inner > 1, one outer slice's column) larger than the limit is refused with a KernelError.
"""
from __future__ import annotations

import math

from ....errors import KernelError
from ..templates import WGSL_TYPE, enable_f16, render
from .registry import launcher
from .reduce import pack_words, split_boxes
from .strided import footprint, window


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
    wg = 256 if R >= 1024 else 64 if R >= 64 else 32
    src = render("softmax", flags={"LOG": v.op == "log_softmax"}, ENABLE=enable_f16(d), T=WGSL_TYPE[d], WG=wg)
    key = f"softmax:{v.op}:{d}:{wg}"
    st = (R * inner, inner, 1)
    ops = [(0, st, isz), (0, st, isz)]

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
        words = [nrows, R, sizes[2], R * inner, inner, xo, oo, 0]
        be.launch(key, src, [wo, wx], pack_words(words, 16), nrows)
