"""Kullback-Leibler divergence KL(y || p) with the model output as log-probabilities
(torch.nn.functional.kl_div): y (log y - pred), 0 where y = 0.

Why batchmean by default: it is the true KL averaged over examples; torch's 'mean' (kept as a choice)
divides by every element, classes included. Targets are distributions of the output's shape, or
log-probabilities with log_target = true. Typical use: distillation towards a teacher's probabilities.
"""
from __future__ import annotations

from scellis_jupyter.catalog import Param, loss
from scellis_jupyter.catalog.losses import Target, as_float, reduce, reduction_param, refuse
from scellis_jupyter.graph import functional as F


@loss("kl_div", summary="KL divergence from target distributions to log-probability outputs", params={
    "log_target": Param(bool, False, doc="targets are log-probabilities"),
    "reduction": reduction_param("batchmean", extra=("batchmean",)),
})
class KLDiv:
    inputs = "logprob"

    def __init__(self, log_target=False, reduction="batchmean"):
        self.log_target, self.reduction = log_target, reduction

    def target(self, out_shape: tuple) -> Target:
        if not out_shape:
            raise refuse("kl_div", out_shape, "with a class axis (log-probabilities [..., classes])")
        return Target("logdist" if self.log_target else "dist", out_shape)

    def __call__(self, pred, y):
        y = as_float(y, pred)
        if self.log_target:
            per = F.mul(F.exp(y), F.sub(y, pred))
        else:
            pos = F.gt(y, 0.0)
            ylogy = F.mul(y, F.log(F.where(pos, y, F.ones(y.shape, y.dtype))))   # xlogy: 0 where y = 0
            per = F.sub(ylogy, F.mul(y, pred))
        if self.reduction == "batchmean":
            return F.div(F.sum_(per), float(pred.shape[0]))
        return reduce(per, self.reduction)
