"""Accuracy and top-k accuracy: the fraction of samples whose class is among the k highest logits.

Why ranks with index tie-breaking: top_k=1 then agrees exactly with the argmax the other metrics use, and
the state is two integer counts, exact over any batching.
"""
from __future__ import annotations

import numpy as np

from scellis_jupyter.catalog import CatalogError, Param, metric
from scellis_jupyter.catalog.metrics import Accumulator, as_logits


@metric("accuracy", summary="Accuracy (top-k: the target among the k highest logits)", params={
    "top_k": Param(int, 1, lo=1, doc="count a hit when the target is among the k highest logits"),
})
class Accuracy(Accumulator):
    name = "accuracy"
    higher_is_better = True
    summed = ("correct", "total")

    def __init__(self, top_k=1):
        self.top_k = top_k
        self.reset()

    def update(self, pred: np.ndarray, target: np.ndarray) -> None:
        z, t = as_logits(self, pred, target)
        if z.ndim == 1:                                   # binary: logit > 0 is class 1
            z = np.stack([np.zeros_like(z), z], axis=1)
        c = z.shape[1]
        if self.top_k > c:
            raise CatalogError(f"top_k={self.top_k} is more than the {c} classes of logits {tuple(z.shape)}",
                               where="metric accuracy", hint=f"use top_k <= {c}")
        zt = z[np.arange(len(t)), t][:, None]
        idx = np.arange(c)[None, :]
        rank = np.sum((z > zt) | ((z == zt) & (idx < t[:, None])), axis=1)   # classes ranked above the target
        self._add(correct=np.array(np.sum(rank < self.top_k), np.int64), total=np.array(len(t), np.int64))

    def compute(self) -> float:
        st = self._require()
        if st["total"] == 0:
            raise CatalogError("accuracy of zero samples", where="metric accuracy", hint="update with data first")
        return float(st["correct"]) / float(st["total"])
