"""Uniform U(a, b) (torch.nn.init.uniform_'s defaults), from the stream's 24-bit uniforms."""
from __future__ import annotations

import numpy as np

from scellis_jupyter.catalog import CatalogError, Param, initializer
from scellis_jupyter.catalog.initializers import finish


@initializer("uniform", summary="Uniform U(a, b)", params={
    "a": Param(float, 0.0, doc="lower bound"),
    "b": Param(float, 1.0, doc="upper bound"),
})
class Uniform:
    random = True

    def __init__(self, a=0.0, b=1.0):
        if not a < b:
            raise CatalogError(f"a={a} must be below b={b}", where="initializer uniform")
        self.a, self.b = a, b

    def __call__(self, shape: tuple, fan_in: int, fan_out: int, stream, name: str = "") -> np.ndarray:
        u = stream.uniform(tuple(shape)).astype(np.float64)
        return finish(self.a + (self.b - self.a) * u, shape)
