"""Precision tp / (tp + fp), averaged as scikit-learn's precision_score does.

Why a confusion matrix as state: it is exact integer counts, so accumulating over batches or merging
workers gives exactly the metric on all the data, and every average mode is computed from the same counts.
"""
from __future__ import annotations

import numpy as np

from scellis_jupyter.catalog import Param, metric
from scellis_jupyter.catalog.metrics import (AVERAGES, Accumulator, as_logits, confusion_counts,
                                             precision_recall_f1, predicted_class)


@metric("precision", summary="Precision tp / (tp + fp), macro/micro/weighted/binary", params={
    "average": Param(str, "macro", choices=AVERAGES, doc="macro / micro / weighted over classes, or binary"),
    "pos_label": Param(int, 1, lo=0, doc="the positive class when average='binary'"),
    "zero_division": Param(float, 0.0, lo=0.0, hi=1.0, doc="the value of a 0/0 ratio"),
})
class Precision(Accumulator):
    name = "precision"
    higher_is_better = True
    summed = ("cm",)

    def __init__(self, average="macro", pos_label=1, zero_division=0.0):
        self.average, self.pos_label, self.zero_division = average, pos_label, zero_division
        self.reset()

    def update(self, pred: np.ndarray, target: np.ndarray) -> None:
        z, t = as_logits(self, pred, target)
        self._add(cm=confusion_counts(predicted_class(z), t, 2 if z.ndim == 1 else z.shape[1]))

    def compute(self) -> float:
        cm = self._require()["cm"]
        return precision_recall_f1(self, cm, self.average, self.pos_label, self.zero_division)[0]
