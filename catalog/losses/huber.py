"""Huber loss (Huber 1964, torch.nn.functional.huber_loss): 0.5 d^2 where |d| < delta,
delta (|d| - 0.5 delta) elsewhere.

Why: MSE near zero, L1 (scaled by delta) for outliers; equals smooth_l1 times delta when beta = delta.
"""
from __future__ import annotations

from scellis_jupyter.catalog import Param, loss
from scellis_jupyter.catalog.losses import Target, as_float, reduce, reduction_param
from scellis_jupyter.graph import functional as F


@loss("huber", summary="Huber: quadratic below delta, linear (slope delta) above", params={
    "delta": Param(float, 1.0, lo=0.0, lo_open=True, doc="where the quadratic part turns linear"),
    "reduction": reduction_param(),
})
class Huber:
    def __init__(self, delta=1.0, reduction="mean"):
        self.delta, self.reduction = delta, reduction

    def target(self, out_shape: tuple) -> Target:
        return Target("real", out_shape)

    def __call__(self, pred, y):
        d = F.sub(pred, as_float(y, pred))
        n = F.abs_(d)
        lin = F.mul(F.sub(n, 0.5 * self.delta), self.delta)
        return reduce(F.where(F.lt(n, self.delta), F.mul(F.mul(d, d), 0.5), lin), self.reduction)
