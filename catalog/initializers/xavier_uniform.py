"""Xavier/Glorot uniform (Glorot & Bengio 2010): U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out)).

Why both fans: it keeps the variance of activations (fan_in) and of gradients (fan_out) roughly constant
for linear/tanh-like layers; torch.nn.init.xavier_uniform_ with the same gain draws the same law.
"""
from __future__ import annotations

from scellis_jupyter.catalog import initializer
from scellis_jupyter.catalog.initializers import XAVIER_PARAMS, Xavier


@initializer("xavier_uniform", summary="Xavier/Glorot uniform U(-b, b), b = gain sqrt(6 / (fan_in + fan_out))",
             params=XAVIER_PARAMS)
class XavierUniform(Xavier):
    name, law = "xavier_uniform", "uniform"
