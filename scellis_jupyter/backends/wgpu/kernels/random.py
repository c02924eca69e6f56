"""philox_bits / philox_uniform on the device, bit-identical with the numpy Philox (kernels/philox.wgsl)."""
from __future__ import annotations

import math
import struct

from ..templates import render
from . import launcher


@launcher("philox_bits", "philox_uniform")
def _philox(be, v, ins, out):
    n = math.prod(v.shape)
    if n == 0:
        return
    off = int(v.attrs["offset"])
    k0, k1 = (int(k) & 0xFFFFFFFF for k in v.attrs["key"])
    params = struct.pack("<8I", n, off & 0xFFFFFFFF, (off >> 32) & 0xFFFFFFFF, k0, k1,
                         1 if v.op == "philox_uniform" else 0, 0, 0)
    be.launch("philox", render("philox"), [out], params, (n + 63) // 64)
