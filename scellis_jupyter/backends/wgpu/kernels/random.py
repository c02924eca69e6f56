"""philox_bits / philox_uniform on the device, bit-identical with the numpy Philox (kernels/philox.wgsl).

One thread per counter block (64-bit block numbers split into lo/hi with carry) writes up to 4 words,
bounds-checked at both ends since attrs['offset'] need not be a multiple of 4. uniform = (bits >> 8)
* 2^-24 is exact in f32, so it is bit-identical too. Outputs larger than the binding limit are written
in chunks of whole blocks, each a window of the output at its own stream offset. An optional input
(u32 [lo, hi]) is a word offset added on the device: the stream's position when the step starts.
"""
from __future__ import annotations

import math
import struct

from ..templates import render
from .registry import launcher
from .strided import window


@launcher("philox_bits", "philox_uniform")
def _philox(be, v, ins, out):
    n = math.prod(v.shape)
    if n == 0:
        return
    off = int(v.attrs["offset"])
    k0, k1 = (int(k) & 0xFFFFFFFF for k in v.attrs["key"])
    based = len(ins) == 1
    src = render("philox", flags={"BASED": based, "INT64": be.int64})
    chunk = max(4, (be.binding_limit - be.offset_align) // 4 // 4 * 4)
    s = 0
    while s < n:
        m = min(chunk, n - s)
        o = off + s
        w, ob = window(out, 0, s, s + m - 1, 4, be.offset_align)
        blk = o // 4
        params = struct.pack("<8I", m, blk & 0xFFFFFFFF, (blk >> 32) & 0xFFFFFFFF, k0, k1, o % 4, ob,
                             1 if v.op == "philox_uniform" else 0)
        # a base offset may move the first word to a later lane: one more block covers it
        blocks = (o % 4 + m + 3) // 4 + (1 if based else 0)
        key = ("philox_based" if based else "philox") + f":i64={be.int64}"
        be.launch(key, src, ([ins[0], w] if based else [w]), params, (blocks + 63) // 64)
        s += m
