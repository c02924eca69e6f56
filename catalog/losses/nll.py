"""Negative log-likelihood on log-probabilities (torch.nn.functional.nll_loss), class weights and
ignore_index as torch computes them.

Why: for models whose last node already gives log-probabilities (log_softmax), so cross_entropy would
normalize twice. Targets are class ids (i32) of the output's shape without its class axis.
"""
from __future__ import annotations

from scellis_jupyter.catalog import CatalogError, Param, loss
from scellis_jupyter.catalog.losses import Target, class_loss, reduction_param, refuse, where_of


@loss("nll", summary="negative log-likelihood on log-probabilities; class weights, ignore_index", params={
    "weight": Param(tuple, None, lo=0.0, optional=True, doc="one weight per class"),
    "ignore_index": Param(int, -100, doc="labels with this value contribute nothing"),
    "reduction": reduction_param(),
})
class NLL:
    inputs = "logprob"

    def __init__(self, weight=None, ignore_index=-100, reduction="mean"):
        self.weight = None if weight is None else tuple(weight)
        self.ignore_index, self.reduction = ignore_index, reduction

    def target(self, out_shape: tuple) -> Target:
        if not out_shape:
            raise refuse("nll", out_shape, "with a class axis (log-probabilities [..., classes])")
        if self.weight is not None and len(self.weight) != out_shape[-1]:
            raise CatalogError(f"weight has {len(self.weight)} values for {out_shape[-1]} classes",
                               where=where_of("nll"), hint="give one weight per class")
        return Target("class", out_shape[:-1], classes=out_shape[-1], ignore_index=self.ignore_index)

    def __call__(self, pred, y):
        return class_loss(pred, y, self.weight, self.ignore_index, 0.0, self.reduction)
