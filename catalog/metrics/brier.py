"""Brier score: mean squared error of the predicted probabilities.

Binary (two classes): mean over samples of (p_1 - y)^2 on the positive-class probability, as
scikit-learn's brier_score_loss; more classes: mean over samples of sum_k (p_k - y_k)^2 with one-hot y
(Brier 1950). A sum and a count as state, so batches and workers add up.
"""
from __future__ import annotations

import numpy as np

from scellis_jupyter.catalog import CatalogError, metric
from scellis_jupyter.catalog.metrics import Accumulator, as_logits, as_probs


@metric("brier", summary="Brier score (binary: positive-class probability; multi-class: sum over classes)",
        params={})
class Brier(Accumulator):
    name = "brier"
    higher_is_better = False
    summed = ("sq", "n")

    def __init__(self):
        self.reset()

    def update(self, pred: np.ndarray, target: np.ndarray) -> None:
        z, t = as_logits(self, pred, target)
        p = as_probs(z)
        if p.shape[1] == 2:
            sq = np.sum((p[:, 1] - (t == 1)) ** 2)
        else:
            onehot = np.eye(p.shape[1])[t]
            sq = np.sum((p - onehot) ** 2)
        self._add(sq=np.array(sq, np.float64), n=np.array(len(t), np.int64))

    def compute(self) -> float:
        st = self._require()
        if st["n"] == 0:
            raise CatalogError("Brier score of zero samples", where="metric brier", hint="update with data first")
        return float(st["sq"]) / float(st["n"])
