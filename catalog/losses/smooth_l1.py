"""Smooth L1 (Girshick 2015, torch.nn.functional.smooth_l1_loss): 0.5 d^2 / beta where |d| < beta,
|d| - 0.5 beta elsewhere.

Why separate from huber: torch keeps both; smooth_l1 divides the quadratic part by beta, so its slope
outside the band is 1 whatever beta is (huber's is delta). beta = 0 is plain L1.
"""
from __future__ import annotations

from scellis_jupyter.catalog import Param, loss
from scellis_jupyter.catalog.losses import Target, as_float, reduce, reduction_param
from scellis_jupyter.graph import functional as F


@loss("smooth_l1", summary="smooth L1: quadratic below beta, linear above (slope 1)", params={
    "beta": Param(float, 1.0, lo=0.0, doc="width of the quadratic band; 0 gives L1"),
    "reduction": reduction_param(),
})
class SmoothL1:
    def __init__(self, beta=1.0, reduction="mean"):
        self.beta, self.reduction = beta, reduction

    def target(self, out_shape: tuple) -> Target:
        return Target("real", out_shape)

    def __call__(self, pred, y):
        d = F.sub(pred, as_float(y, pred))
        n = F.abs_(d)
        if self.beta == 0:
            return reduce(n, self.reduction)
        quad = F.div(F.mul(F.mul(d, d), 0.5), self.beta)
        return reduce(F.where(F.lt(n, self.beta), quad, F.sub(n, 0.5 * self.beta)), self.reduction)
