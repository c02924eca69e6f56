"""Xavier/Glorot normal (Glorot & Bengio 2010): N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out)).

Why: the normal counterpart of xavier_uniform with the same variance (torch.nn.init.xavier_normal_).
"""
from __future__ import annotations

from scellis_jupyter.catalog import initializer
from scellis_jupyter.catalog.initializers import XAVIER_PARAMS, Xavier


@initializer("xavier_normal", summary="Xavier/Glorot normal, std = gain sqrt(2 / (fan_in + fan_out))",
             params=XAVIER_PARAMS)
class XavierNormal(Xavier):
    name, law = "xavier_normal", "normal"
