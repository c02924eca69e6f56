"""Xavier/Glorot normal (Glorot & Bengio 2010): N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out)).

Why: the normal counterpart of xavier_uniform with the same variance (torch.nn.init.xavier_normal_).
"""
from __future__ import annotations

import math

import numpy as np

from scellis_jupyter.catalog import Param, initializer
from scellis_jupyter.catalog.initializers import fan, finish


@initializer("xavier_normal", summary="Xavier/Glorot normal, std = gain sqrt(2 / (fan_in + fan_out))",
             params={"gain": Param(float, 1.0, lo=0.0, doc="scale, e.g. initializers.gain('tanh')")})
class XavierNormal:
    random = True

    def __init__(self, gain=1.0):
        self.gain = gain

    def __call__(self, shape: tuple, fan_in: int, fan_out: int, stream, name: str = "") -> np.ndarray:
        n = fan("xavier_normal", shape, fan_in, fan_out) + fan("xavier_normal", shape, fan_in, fan_out, "fan_out")
        std = self.gain * math.sqrt(2.0 / n)
        return finish(stream.normal(tuple(shape)).astype(np.float64) * std, shape)
