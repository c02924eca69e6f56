"""Cross-entropy on logits over the last axis, with class weights, ignore_index and label smoothing,
exactly as torch.nn.functional.cross_entropy computes them.

Why torch's formula to the letter: with weights the mean divides by the summed weights of the counted
labels, and label smoothing adds eps/C times the (weighted) sum of -log p over classes, normalized the
same way, so a run here and in PyTorch see the same number. Targets are class ids (i32) of the output's
shape without its last (class) axis; labels equal to ignore_index count for nothing.
"""
from __future__ import annotations

from scellis_jupyter.catalog import CatalogError, Param, loss
from scellis_jupyter.catalog.losses import Target, class_loss, reduction_param, refuse, where_of
from scellis_jupyter.graph import functional as F


@loss("cross_entropy", summary="softmax cross-entropy on logits; class weights, ignore_index, label smoothing",
      params={
          "weight": Param(tuple, None, lo=0.0, optional=True, doc="one weight per class (rescales its labels)"),
          "ignore_index": Param(int, -100, doc="labels with this value contribute nothing"),
          "label_smoothing": Param(float, 0.0, lo=0.0, hi=1.0, doc="mix eps of the uniform distribution into "
                                                                   "the one-hot target"),
          "reduction": reduction_param(),
      })
class CrossEntropy:
    def __init__(self, weight=None, ignore_index=-100, label_smoothing=0.0, reduction="mean"):
        self.weight = None if weight is None else tuple(weight)
        self.ignore_index, self.label_smoothing, self.reduction = ignore_index, label_smoothing, reduction

    def target(self, out_shape: tuple) -> Target:
        if not out_shape:
            raise refuse("cross_entropy", out_shape, "with a class axis (logits [..., classes])")
        if self.weight is not None and len(self.weight) != out_shape[-1]:
            raise CatalogError(f"weight has {len(self.weight)} values for {out_shape[-1]} classes",
                               where=where_of("cross_entropy"), hint="give one weight per class")
        return Target("class", out_shape[:-1], classes=out_shape[-1], ignore_index=self.ignore_index)

    def __call__(self, pred, y):
        return class_loss(F.log_softmax(pred, -1), y, self.weight, self.ignore_index, self.label_smoothing,
                          self.reduction)

