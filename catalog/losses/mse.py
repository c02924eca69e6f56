"""Mean squared error (torch.nn.functional.mse_loss): (pred - y)^2, targets of the output's shape.

Why first: the default loss of regression; the model output and the target line up element for element.
"""
from __future__ import annotations

from scellis_jupyter.catalog import loss
from scellis_jupyter.catalog.losses import Target, as_float, reduce, reduction_param
from scellis_jupyter.graph import functional as F


@loss("mse", summary="mean squared error (pred - y)^2 against same-shape real targets", params={
    "reduction": reduction_param(),
})
class MSE:
    def __init__(self, reduction="mean"):
        self.reduction = reduction

    def target(self, out_shape: tuple) -> Target:
        return Target("real", out_shape)

    def __call__(self, pred, y):
        d = F.sub(pred, as_float(y, pred))
        return reduce(F.mul(d, d), self.reduction)
