"""Orthogonal (Saxe et al. 2014): a (semi-)orthogonal matrix times gain, from the QR of a normal matrix.

Why the sign fix: Q of a QR is unique only up to column signs; multiplying by sign(diag(R)) makes Q
Haar-distributed (uniform over orthogonal matrices), as torch.nn.init.orthogonal_ does. The parameter is
viewed as (shape[0], prod(shape[1:])); rows are orthonormal when rows <= cols, columns otherwise.
"""
from __future__ import annotations

import math

import numpy as np

from scellis_jupyter.catalog import CatalogError, Param, initializer
from scellis_jupyter.catalog.initializers import finish


@initializer("orthogonal", summary="Orthogonal matrix (QR of a normal matrix, sign-fixed) times gain",
             params={"gain": Param(float, 1.0, lo=0.0, doc="scale of the orthogonal matrix")})
class Orthogonal:
    random = True

    def __init__(self, gain=1.0):
        self.gain = gain

    def __call__(self, shape: tuple, fan_in: int, fan_out: int, stream, name: str = "") -> np.ndarray:
        if len(shape) < 2 or math.prod(shape) == 0:
            raise CatalogError(f"orthogonal needs a non-empty parameter of at least 2 dimensions, {name or 'this'} "
                               f"has shape {tuple(shape)}", where="initializer orthogonal",
                               hint="use it for weights; biases and norms take zeros / ones")
        rows, cols = shape[0], math.prod(shape[1:])
        a = stream.normal((rows, cols)).astype(np.float64)
        if rows < cols:
            a = a.T
        q, r = np.linalg.qr(a)
        q = q * np.sign(np.diag(r))[None, :]
        if rows < cols:
            q = q.T
        return finish(q * self.gain, shape)
