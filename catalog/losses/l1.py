"""Mean absolute error (torch.nn.functional.l1_loss): |pred - y|, targets of the output's shape.

Why: robust to outliers where MSE is not; its gradient at a zero residual is 0, as torch's sign(0).
"""
from __future__ import annotations

from scellis_jupyter.catalog import loss
from scellis_jupyter.catalog.losses import Target, as_float, reduce, reduction_param
from scellis_jupyter.graph import functional as F


@loss("l1", summary="mean absolute error |pred - y| against same-shape real targets", params={
    "reduction": reduction_param(),
})
class L1:
    def __init__(self, reduction="mean"):
        self.reduction = reduction

    def target(self, out_shape: tuple) -> Target:
        return Target("real", out_shape)

    def __call__(self, pred, y):
        return reduce(F.abs_(F.sub(pred, as_float(y, pred))), self.reduction)
