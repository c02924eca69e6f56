"""Xavier/Glorot uniform (Glorot & Bengio 2010): U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out)).

Why both fans: it keeps the variance of activations (fan_in) and of gradients (fan_out) roughly constant
for linear/tanh-like layers; torch.nn.init.xavier_uniform_ with the same gain draws the same law.
"""
from __future__ import annotations

import math

import numpy as np

from scellis_jupyter.catalog import Param, initializer
from scellis_jupyter.catalog.initializers import fan, finish


@initializer("xavier_uniform", summary="Xavier/Glorot uniform U(-b, b), b = gain sqrt(6 / (fan_in + fan_out))",
             params={"gain": Param(float, 1.0, lo=0.0, doc="scale, e.g. initializers.gain('tanh')")})
class XavierUniform:
    random = True

    def __init__(self, gain=1.0):
        self.gain = gain

    def __call__(self, shape: tuple, fan_in: int, fan_out: int, stream, name: str = "") -> np.ndarray:
        n = fan("xavier_uniform", shape, fan_in, fan_out) + fan("xavier_uniform", shape, fan_in, fan_out, "fan_out")
        bound = self.gain * math.sqrt(6.0 / n)
        u = stream.uniform(tuple(shape)).astype(np.float64)
        return finish((2.0 * u - 1.0) * bound, shape)
