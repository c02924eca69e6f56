"""AdamW (Loshchilov & Hutter, 2019) with torch.optim.AdamW's semantics.

Why separate from Adam: the decay is decoupled (p *= 1 - lr * weight_decay before the Adam step), which
is not the same as L2 in the gradient once the adaptive denominator divides it.
"""
from __future__ import annotations

from scellis_jupyter.catalog import Param, optimizer
from scellis_jupyter.catalog.optimizers import AdamFamily, adam_params
from scellis_jupyter.graph import functional as F


@optimizer("adamw", summary="AdamW (Loshchilov & Hutter 2019): Adam with decoupled weight decay",
           params=adam_params(Param(float, 0.01, lo=0.0, doc="decoupled: p *= 1 - lr * weight_decay")))
class AdamW(AdamFamily):
    def __init__(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, amsgrad=False):
        super().__init__(lr, betas, eps, weight_decay, amsgrad)

    def decay(self, x, g, lr):
        return F.mul(x, F.sub(1.0, F.mul(lr, self.weight_decay))), g
