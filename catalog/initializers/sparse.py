"""Sparse (Martens 2010): N(0, std^2) with a fraction `sparsity` of each column set to zero.

Why per column: each output unit (column of the (rows, cols) view, as torch.nn.init.sparse_) sees exactly
ceil(sparsity * rows) zeroed inputs. Which rows are zeroed comes from one stream word per element
(argsort per column, ties by index), so it is reproducible bit for bit.
"""
from __future__ import annotations

import math

import numpy as np

from scellis_jupyter.catalog import CatalogError, Param, initializer
from scellis_jupyter.catalog.initializers import finish


@initializer("sparse", summary="Normal(0, std) with a fraction `sparsity` of each column zeroed", params={
    "sparsity": Param(float, 0.1, lo=0.0, hi=1.0, doc="fraction of zeros per column (rounded up)"),
    "std": Param(float, 0.01, lo=0.0, doc="std of the non-zero values"),
})
class Sparse:
    random = True

    def __init__(self, sparsity=0.1, std=0.01):
        self.sparsity, self.std = sparsity, std

    def __call__(self, shape: tuple, fan_in: int, fan_out: int, stream, name: str = "") -> np.ndarray:
        if len(shape) != 2:
            raise CatalogError(f"sparse needs a 2-D parameter, {name or 'this'} has shape {tuple(shape)}",
                               where="initializer sparse", hint="use it for linear weights")
        rows, cols = shape
        x = stream.normal((rows, cols)).astype(np.float64) * self.std
        zeros = math.ceil(self.sparsity * rows)
        keys = stream.bits(rows * cols).reshape(cols, rows)
        order = np.argsort(keys, axis=1, kind="stable")[:, :zeros]   # per column: the rows to zero
        x[order.T, np.arange(cols)[None, :]] = 0.0
        return finish(x, shape)
