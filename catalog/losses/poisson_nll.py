"""Poisson negative log-likelihood (torch.nn.functional.poisson_nll_loss): exp(x) - y x on log-rates,
or x - y log(x + eps) on rates; full adds Stirling's term y log y - y + 0.5 log(2 pi y) where y > 1.

Why log-rates by default: the model output can be any real number and exp keeps the rate positive.
Targets are non-negative counts of the output's shape.
"""
from __future__ import annotations

import math

from scellis_jupyter.catalog import Param, loss
from scellis_jupyter.catalog.losses import Target, as_float, reduce, reduction_param
from scellis_jupyter.graph import functional as F


@loss("poisson_nll", summary="Poisson negative log-likelihood on log-rates (or rates) and count targets", params={
    "log_input": Param(bool, True, doc="the output is log(rate)"),
    "full": Param(bool, False, doc="add Stirling's approximation of log(y!)"),
    "eps": Param(float, 1e-8, lo=0.0, doc="keeps log(rate) finite when log_input is false"),
    "reduction": reduction_param(),
})
class PoissonNLL:
    def __init__(self, log_input=True, full=False, eps=1e-8, reduction="mean"):
        self.log_input, self.full, self.eps, self.reduction = log_input, full, eps, reduction
        self.inputs = "real" if log_input else "positive"

    def target(self, out_shape: tuple) -> Target:
        return Target("count", out_shape)

    def __call__(self, pred, y):
        y = as_float(y, pred)
        if self.log_input:
            per = F.sub(F.exp(pred), F.mul(y, pred))
        else:
            per = F.sub(pred, F.mul(y, F.log(F.add(pred, self.eps))))
        if self.full:
            big = F.gt(y, 1.0)
            ys = F.where(big, y, F.ones(y.shape, y.dtype))
            st = F.add(F.sub(F.mul(ys, F.log(ys)), ys), F.mul(F.log(F.mul(ys, 2 * math.pi)), 0.5))
            per = F.add(per, F.where(big, st, 0.0))
        return reduce(per, self.reduction)
