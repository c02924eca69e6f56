"""Confusion matrix (C, C): rows are true classes, columns predicted ones, optionally normalized.

Why all C classes of the logits (not only those seen): the matrix has the same shape on every batch and
worker, so counts add up; scikit-learn's confusion_matrix(labels=range(C)) is the same matrix.
"""
from __future__ import annotations

import numpy as np

from scellis_jupyter.catalog import Param, metric
from scellis_jupyter.catalog.metrics import ConfusionCounts


@metric("confusion_matrix", summary="Confusion matrix, rows true, columns predicted (normalize true/pred/all)",
        params={"normalize": Param(str, "none", choices=("none", "true", "pred", "all"),
                                   doc="divide by row sums (true), column sums (pred) or the total")})
class ConfusionMatrix(ConfusionCounts):
    name = "confusion_matrix"
    higher_is_better = True        # larger is better on the diagonal; not a scalar to early-stop on

    def __init__(self, normalize="none"):
        self.normalize = normalize
        self.reset()

    def compute(self) -> np.ndarray:
        cm = self._require()["cm"].copy()
        if self.normalize == "none":
            return cm
        if self.normalize == "true":
            den = cm.sum(axis=1, keepdims=True)
        elif self.normalize == "pred":
            den = cm.sum(axis=0, keepdims=True)
        else:
            den = np.array(cm.sum())
        out = np.zeros(cm.shape, np.float64)         # an empty row/column stays 0, as in scikit-learn
        np.divide(cm, den, out=out, where=den != 0)
        return out
