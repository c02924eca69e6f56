"""Multi-class hinge loss (Weston & Watkins 1999 style; torch.nn.functional.multi_margin_loss):
sum over i != y of max(0, margin - x_y + x_i)^p / C, times weight[y].

Why: an SVM-like classifier loss on raw scores; only classes within the margin of the right one count.
Targets are class ids like cross_entropy; the mean is over examples (torch does not divide by weights).
"""
from __future__ import annotations

from scellis_jupyter.catalog import CatalogError, Param, loss
from scellis_jupyter.catalog.losses import Target, constant, pick, reduce, reduction_param, refuse, where_of
from scellis_jupyter.graph import functional as F


@loss("multi_margin", summary="multi-class hinge loss on scores (p = 1 or 2), class-id targets", params={
    "p": Param(int, 1, choices=(1, 2), doc="1: hinge, 2: squared hinge"),
    "margin": Param(float, 1.0, doc="required lead of the right class"),
    "weight": Param(tuple, None, lo=0.0, optional=True, doc="one weight per class (of the right class)"),
    "reduction": reduction_param(),
})
class MultiMargin:
    def __init__(self, p=1, margin=1.0, weight=None, reduction="mean"):
        self.p, self.margin, self.reduction = p, margin, reduction
        self.weight = None if weight is None else tuple(weight)

    def target(self, out_shape: tuple) -> Target:
        if not out_shape:
            raise refuse("multi_margin", out_shape, "with a class axis (scores [..., classes])")
        if self.weight is not None and len(self.weight) != out_shape[-1]:
            raise CatalogError(f"weight has {len(self.weight)} values for {out_shape[-1]} classes",
                               where=where_of("multi_margin"), hint="give one weight per class")
        return Target("class", out_shape[:-1], classes=out_shape[-1])

    def __call__(self, pred, y):
        c = pred.shape[-1]
        xy, _ = pick(pred, y)
        z = F.relu(F.add(F.sub(self.margin, F.reshape(xy, tuple(xy.shape) + (1,))), pred))
        if self.p == 2:
            z = F.mul(z, z)
        classes = F.reshape(F.arange(c), (1,) * (len(pred.shape) - 1) + (c,))
        other = F.ne(F.broadcast_to(classes, pred.shape), F.reshape(F.cast(y, "i32"), tuple(y.shape) + (1,)))
        per = F.div(F.sum_(F.where(other, z, 0.0), -1), float(c))
        if self.weight is not None:
            wy, _ = pick(F.broadcast_to(constant(self.weight, pred.dtype), pred.shape), y)
            per = F.mul(per, wy)
        return reduce(per, self.reduction)
