"""Triplet margin loss (Schroff et al. 2015, FaceNet; torch.nn.functional.triplet_margin_loss):
max(d(a, p) - d(a, n) + margin, 0) with d(x, y) = ||x - y + eps||_p.

Convention: the model output is [B, 3, D] = (anchor, positive, negative) per example, e.g. one shared
encoder applied to an input of [3, features]. swap uses min(d(a, n), d(p, n)) as the negative distance
(Balntas et al. 2016). No target: which row is which is the convention.
"""
from __future__ import annotations

from scellis_jupyter.catalog import Param, loss
from scellis_jupyter.catalog.losses import Target, parts, reduce, reduction_param, refuse
from scellis_jupyter.graph import functional as F


def pairwise_distance(x1, x2, p: float, eps: float):
    """torch.nn.functional.pairwise_distance: ||x1 - x2 + eps||_p over the last axis."""
    d = F.add(F.sub(x1, x2), eps)
    if p == 2.0:
        return F.sqrt(F.sum_(F.mul(d, d), -1))
    if p == 1.0:
        return F.sum_(F.abs_(d), -1)
    return F.pow_(F.sum_(F.pow_(F.abs_(d), p), -1), 1.0 / p)


@loss("triplet_margin", summary="triplet margin loss over [B, 3, D] = anchor, positive, negative (no target)",
      params={
          "margin": Param(float, 1.0, lo=0.0, doc="how much farther the negative must be"),
          "p": Param(float, 2.0, lo=1.0, doc="norm degree of the distance"),
          "eps": Param(float, 1e-6, lo=0.0, doc="added to the difference (torch's pairwise_distance)"),
          "swap": Param(bool, False, doc="distance swap (Balntas et al. 2016)"),
          "reduction": reduction_param(),
      })
class TripletMargin:
    def __init__(self, margin=1.0, p=2.0, eps=1e-6, swap=False, reduction="mean"):
        self.margin, self.p, self.eps, self.swap, self.reduction = margin, p, eps, swap, reduction

    def target(self, out_shape: tuple) -> Target:
        if len(out_shape) != 2 or out_shape[0] != 3:
            raise refuse("triplet_margin", out_shape, "[3, D] per example (anchor, positive, negative)")
        return Target("none")

    def __call__(self, pred, y=None):
        a, pos, neg = parts(pred, 3)
        dp = pairwise_distance(a, pos, self.p, self.eps)
        dn = pairwise_distance(a, neg, self.p, self.eps)
        if self.swap:
            dn = F.minimum(dn, pairwise_distance(pos, neg, self.p, self.eps))
        return reduce(F.relu(F.add(F.sub(dp, dn), self.margin)), self.reduction)
