"""Binary cross-entropy on logits (torch.nn.functional.binary_cross_entropy_with_logits).

Why on logits: (1 - y) x + (1 + (w - 1) y) softplus(-x) never forms log(0), so it stays finite where a
sigmoid followed by bce saturates. pos_weight (one per output column, torch's semantics) scales the
positive term, trading recall against precision. Targets are probabilities in [0, 1] of the output's
shape (0/1 labels of a binary dataset are read as floats).
"""
from __future__ import annotations

from scellis_jupyter.catalog import CatalogError, Param, loss
from scellis_jupyter.catalog.losses import Target, as_float, constant, reduce, reduction_param, softplus, where_of
from scellis_jupyter.graph import functional as F


@loss("bce_with_logits", summary="binary cross-entropy on logits, optional pos_weight per output column",
      params={
          "pos_weight": Param(tuple, None, lo=0.0, optional=True,
                              doc="weight of positive examples, one per output column (last axis)"),
          "reduction": reduction_param(),
      })
class BCEWithLogits:
    def __init__(self, pos_weight=None, reduction="mean"):
        self.pos_weight = None if pos_weight is None else tuple(pos_weight)
        self.reduction = reduction

    def target(self, out_shape: tuple) -> Target:
        if self.pos_weight is not None and (not out_shape or out_shape[-1] != len(self.pos_weight)):
            raise CatalogError(f"pos_weight has {len(self.pos_weight)} values but the output's last axis is "
                               f"{out_shape[-1] if out_shape else 'missing'}", where=where_of("bce_with_logits"),
                               hint="give one pos_weight per output column")
        return Target("prob", out_shape)

    def __call__(self, pred, y):
        y = as_float(y, pred)
        sp = softplus(F.neg(pred))                                  # -log sigmoid(x)
        w = 1.0 if self.pos_weight is None else F.add(F.mul(F.sub(constant(self.pos_weight, pred.dtype), 1.0), y), 1.0)
        per = F.add(F.mul(F.sub(1.0, y), pred), F.mul(w, sp) if self.pos_weight is not None else sp)
        return reduce(per, self.reduction)
