"""Margin ranking loss (torch.nn.functional.margin_ranking_loss): max(0, -y (x1 - x2) + margin).

Convention: the model's last axis holds the two scores, output [..., 2] = (x1, x2) (e.g. one scorer
applied to an input of [2, features] and reshaped to [2]); the target is +1 where x1 should rank higher,
-1 where x2 should, one per score pair (the output without its last axis).
"""
from __future__ import annotations

from scellis_jupyter.catalog import Param, loss
from scellis_jupyter.catalog.losses import Target, as_float, reduce, reduction_param, refuse
from scellis_jupyter.graph import functional as F


@loss("margin_ranking", summary="margin ranking loss over [..., 2] score pairs with +1/-1 targets", params={
    "margin": Param(float, 0.0, doc="how far the right score must lead"),
    "reduction": reduction_param(),
})
class MarginRanking:
    def __init__(self, margin=0.0, reduction="mean"):
        self.margin, self.reduction = margin, reduction

    def target(self, out_shape: tuple) -> Target:
        if not out_shape or out_shape[-1] != 2:
            raise refuse("margin_ranking", out_shape, "[..., 2] (two scores per pair)")
        return Target("sign", out_shape[:-1])

    def __call__(self, pred, y):
        nd = len(pred.shape)
        x1 = F.reshape(F.slice_(pred, (0,) * nd, tuple(pred.shape[:-1]) + (1,), (1,) * nd), pred.shape[:-1])
        x2 = F.reshape(F.slice_(pred, (0,) * (nd - 1) + (1,), tuple(pred.shape), (1,) * nd), pred.shape[:-1])
        y = as_float(y, pred)
        return reduce(F.relu(F.add(F.neg(F.mul(y, F.sub(x1, x2))), self.margin)), self.reduction)
