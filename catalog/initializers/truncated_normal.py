"""Truncated normal: N(mean, std^2) conditioned on [a, b], drawn by the inverse CDF of uniforms.

Why the inverse CDF (not rejection): one draw per element, so a fixed number of stream words per
parameter and the same bits on every machine. Uniforms have 53 bits (two stream words each) so the
tails resolve; intervals in the upper tail are sampled mirrored, where the CDF has precision.
"""
from __future__ import annotations

import numpy as np
from scipy import special

from scellis_jupyter.catalog import CatalogError, Param, initializer
from scellis_jupyter.catalog.initializers import finish


@initializer("truncated_normal", summary="Normal(mean, std) truncated to [a, b], by inverse CDF", params={
    "mean": Param(float, 0.0, doc="mean of the untruncated normal"),
    "std": Param(float, 1.0, lo=0.0, lo_open=True, doc="std of the untruncated normal"),
    "a": Param(float, -2.0, doc="lower bound (absolute, like torch.nn.init.trunc_normal_)"),
    "b": Param(float, 2.0, doc="upper bound (absolute)"),
})
class TruncatedNormal:
    random = True

    def __init__(self, mean=0.0, std=1.0, a=-2.0, b=2.0):
        if not a < b:
            raise CatalogError(f"a={a} must be below b={b}", where="initializer truncated_normal")
        self.mean, self.std, self.a, self.b = mean, std, a, b

    def __call__(self, shape: tuple, fan_in: int, fan_out: int, stream, name: str = "") -> np.ndarray:
        n = int(np.prod(shape, dtype=np.int64))
        w = stream.bits(2 * n).reshape(n, 2).astype(np.uint64)
        u = (((w[:, 0] >> np.uint64(5)) << np.uint64(26)) + (w[:, 1] >> np.uint64(6))).astype(np.float64)
        u = (u + 0.5) / 2.0 ** 53                                  # in (0, 1), never an endpoint
        lo, hi = (self.a - self.mean) / self.std, (self.b - self.mean) / self.std
        flip = lo > 0                                              # upper tail: sample (-hi, -lo) and negate
        if flip:
            lo, hi = -hi, -lo
        plo, phi = special.ndtr(lo), special.ndtr(hi)
        z = np.clip(special.ndtri(plo + u * (phi - plo)), lo, hi)
        if flip:
            z = -z
        x = finish(self.mean + self.std * z, shape)
        return np.clip(x, np.float32(self.a), np.float32(self.b))  # f32 rounding stays inside [a, b]
