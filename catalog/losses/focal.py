"""Focal loss (Lin et al. 2017, "Focal Loss for Dense Object Detection"): FL(p_t) = -alpha_t (1 - p_t)^gamma
log(p_t), which down-weights examples the model already gets right.

Two forms. mode = "sigmoid" is the paper's: one sigmoid per output column, targets in [0, 1] of the
output's shape, alpha_t = alpha y + (1 - alpha)(1 - y) (the paper uses alpha = 0.25, gamma = 2; alpha
unset means no balancing; torchvision.ops.sigmoid_focal_loss computes the same). mode = "softmax" (the
default, for classifiers) takes p_t from a softmax over the last axis and class-id targets like
cross_entropy, with optional per-class weights as alpha_t; its mean is over examples. gamma = 0 gives
(weighted) cross-entropy / binary cross-entropy.
"""
from __future__ import annotations

from scellis_jupyter.catalog import CatalogError, Param, loss
from scellis_jupyter.catalog.losses import (Target, as_float, constant, pick, reduce, reduction_param, refuse,
                                            softplus, where_of)
from scellis_jupyter.graph import functional as F


@loss("focal", summary="focal loss (Lin et al. 2017): -alpha_t (1 - p_t)^gamma log p_t, softmax or sigmoid",
      params={
          "gamma": Param(float, 2.0, lo=0.0, doc="focusing parameter; 0 is cross-entropy"),
          "alpha": Param(float, None, lo=0.0, hi=1.0, optional=True,
                         doc="sigmoid mode: weight of positives (paper: 0.25); unset = no balancing"),
          "weight": Param(tuple, None, lo=0.0, optional=True, doc="softmax mode: alpha_t per class"),
          "mode": Param(str, "softmax", choices=("softmax", "sigmoid"), doc="class ids, or per-column binary"),
          "reduction": reduction_param(),
      })
class Focal:
    def __init__(self, gamma=2.0, alpha=None, weight=None, mode="softmax", reduction="mean"):
        if mode == "softmax" and alpha is not None:
            raise CatalogError("alpha applies to mode = \"sigmoid\"", where=where_of("focal"),
                               hint="for classes use weight = [one per class]")
        if mode == "sigmoid" and weight is not None:
            raise CatalogError("weight applies to mode = \"softmax\"", where=where_of("focal"),
                               hint="for binary targets use alpha")
        self.gamma, self.alpha, self.mode, self.reduction = gamma, alpha, mode, reduction
        self.weight = None if weight is None else tuple(weight)

    def target(self, out_shape: tuple) -> Target:
        if self.mode == "sigmoid":
            return Target("prob", out_shape)
        if not out_shape:
            raise refuse("focal", out_shape, "with a class axis (logits [..., classes])")
        if self.weight is not None and len(self.weight) != out_shape[-1]:
            raise CatalogError(f"weight has {len(self.weight)} values for {out_shape[-1]} classes",
                               where=where_of("focal"), hint="give one weight per class")
        return Target("class", out_shape[:-1], classes=out_shape[-1])

    def _focus(self, pt):
        return F.pow_(F.sub(1.0, pt), self.gamma) if self.gamma else None

    def __call__(self, pred, y):
        if self.mode == "sigmoid":
            y = as_float(y, pred)
            ce = F.add(F.mul(F.sub(1.0, y), pred), softplus(F.neg(pred)))      # bce on logits
            p = F.sigmoid(pred)
            pt = F.add(F.mul(p, y), F.mul(F.sub(1.0, p), F.sub(1.0, y)))
            per = ce if not self.gamma else F.mul(ce, self._focus(pt))
            if self.alpha is not None:
                per = F.mul(per, F.add(F.mul(y, self.alpha), F.mul(F.sub(1.0, y), 1.0 - self.alpha)))
            return reduce(per, self.reduction)
        lp = F.log_softmax(pred, -1)
        lpt, _ = pick(lp, y)
        per = F.neg(lpt)
        if self.gamma:
            per = F.mul(per, self._focus(F.exp(lpt)))
        if self.weight is not None:
            at, _ = pick(F.broadcast_to(constant(self.weight, pred.dtype), pred.shape), y)
            per = F.mul(per, at)
        return reduce(per, self.reduction)
