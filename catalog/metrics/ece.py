"""Expected calibration error: sum_b |B_b| / n * |acc(B_b) - conf(B_b)| over equal-width bins.

Confidence is the top-class probability (softmax, or max(s, 1 - s) for binary logits); bin b of n_bins
holds confidences in (b / n_bins, (b + 1) / n_bins] (Guo et al. 2017). Why counts and sums per bin as
state: |B_b| (acc - conf) = (#correct - sum of conf) in the bin, so batches and workers simply add.
"""
from __future__ import annotations

import numpy as np

from scellis_jupyter.catalog import CatalogError, Param, metric
from scellis_jupyter.catalog.metrics import Accumulator, as_logits, as_probs


@metric("ece", summary="Expected calibration error over equal-width confidence bins", params={
    "n_bins": Param(int, 15, lo=1, doc="number of equal-width bins on [0, 1]"),
})
class ECE(Accumulator):
    name = "ece"
    higher_is_better = False
    summed = ("count", "correct", "confidence")

    def __init__(self, n_bins=15):
        self.n_bins = n_bins
        self.reset()

    def update(self, pred: np.ndarray, target: np.ndarray) -> None:
        z, t = as_logits(self, pred, target)
        p = as_probs(z)
        conf = p.max(axis=1)
        hit = (np.argmax(p, axis=1) == t).astype(np.int64)
        b = np.clip(np.ceil(conf * self.n_bins).astype(np.int64) - 1, 0, self.n_bins - 1)
        self._add(count=np.bincount(b, minlength=self.n_bins).astype(np.int64),
                  correct=np.bincount(b, weights=hit, minlength=self.n_bins).astype(np.int64),
                  confidence=np.bincount(b, weights=conf, minlength=self.n_bins))

    def compute(self) -> float:
        st = self._require()
        n = int(st["count"].sum())
        if n == 0:
            raise CatalogError("ECE of zero samples", where="metric ece", hint="update with data first")
        return float(np.sum(np.abs(st["correct"] - st["confidence"])) / n)
