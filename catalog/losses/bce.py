"""Binary cross-entropy on probabilities (torch.nn.functional.binary_cross_entropy).

Why kept beside bce_with_logits: a model whose last node is a sigmoid already outputs probabilities. As
in torch, each log is clamped at -100 so a probability of exactly 0 or 1 gives a finite loss; prefer
bce_with_logits for training (it never forms log(0)).
"""
from __future__ import annotations

from scellis_jupyter.catalog import loss
from scellis_jupyter.catalog.losses import Target, as_float, reduce, reduction_param
from scellis_jupyter.graph import functional as F


@loss("bce", summary="binary cross-entropy on probabilities in [0, 1] (logs clamped at -100)", params={
    "reduction": reduction_param(),
})
class BCE:
    inputs = "prob"             # what the model output holds (the conformance checks feed probabilities)

    def __init__(self, reduction="mean"):
        self.reduction = reduction

    def target(self, out_shape: tuple) -> Target:
        return Target("prob", out_shape)

    def __call__(self, pred, y):
        y = as_float(y, pred)
        p = pred
        lo = F.maximum(F.log(p), -100.0)
        l1 = F.maximum(F.log(F.sub(1.0, p)), -100.0)
        per = F.neg(F.add(F.mul(y, lo), F.mul(F.sub(1.0, y), l1)))
        return reduce(per, self.reduction)
