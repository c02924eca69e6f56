"""Constant: every element `val`. Draws nothing, so the init stream's position is unchanged."""
from __future__ import annotations

import numpy as np

from scellis_jupyter.catalog import Param, initializer


@initializer("constant", summary="Every element equal to val", params={"val": Param(float, 0.0, doc="the value")})
class Constant:
    random = False

    def __init__(self, val=0.0):
        self.val = val

    def __call__(self, shape: tuple, fan_in: int, fan_out: int, stream, name: str = "") -> np.ndarray:
        return np.full(tuple(shape), self.val, np.float32)
