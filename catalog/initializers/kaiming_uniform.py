"""Kaiming/He uniform (He et al. 2015): U(-b, b), b = sqrt(3) * gain / sqrt(fan).

Why a nonlinearity: ReLU-like layers halve the variance, so the gain (initializers.gain, torch's table;
`a` is leaky_relu's negative slope) restores it; mode picks whether forward activations (fan_in) or
backward gradients (fan_out) keep their variance. Defaults are torch.nn.init.kaiming_uniform_'s.
"""
from __future__ import annotations

import math

import numpy as np

from scellis_jupyter.catalog import Param, initializer
from scellis_jupyter.catalog.initializers import NONLINEARITIES, fan, finish, gain


@initializer("kaiming_uniform", summary="Kaiming/He uniform, U(-b, b), b = sqrt(3) * gain / sqrt(fan)", params={
    "a": Param(float, 0.0, doc="negative slope of leaky_relu (ignored for other nonlinearities)"),
    "mode": Param(str, "fan_in", choices=("fan_in", "fan_out"), doc="which fan keeps its variance"),
    "nonlinearity": Param(str, "leaky_relu", choices=NONLINEARITIES, doc="picks the gain"),
})
class KaimingUniform:
    random = True

    def __init__(self, a=0.0, mode="fan_in", nonlinearity="leaky_relu"):
        self.a, self.mode, self.nonlinearity = a, mode, nonlinearity

    def __call__(self, shape: tuple, fan_in: int, fan_out: int, stream, name: str = "") -> np.ndarray:
        std = gain(self.nonlinearity, self.a) / math.sqrt(fan("kaiming_uniform", shape, fan_in, fan_out, self.mode))
        bound = math.sqrt(3.0) * std
        u = stream.uniform(tuple(shape)).astype(np.float64)
        return finish((2.0 * u - 1.0) * bound, shape)
