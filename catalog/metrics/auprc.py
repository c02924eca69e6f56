"""AUPRC as average precision: sum over thresholds of (R_n - R_(n-1)) * P_n, scikit-learn's definition.

Why average precision and not the trapezoid under the PR curve: the trapezoid interpolates linearly between
PR points, which is optimistic; AP is the step-wise sum. Binary, or one-vs-rest macro for more classes.
Every score is kept (concatenated state) so the value is exact over any batching.
"""
from __future__ import annotations

import numpy as np

from scellis_jupyter.catalog import CatalogError, metric
from scellis_jupyter.catalog.metrics import OneVsRest


def average_precision(score: np.ndarray, positive: np.ndarray, what: str) -> float:
    n_pos = int(positive.sum())
    if n_pos == 0:
        raise CatalogError(f"average precision is undefined for {what}: no positive samples",
                           where="metric auprc", hint="evaluate on data where every class occurs")
    order = np.argsort(-score, kind="stable")
    s, y = score[order], positive[order].astype(np.int64)
    last = np.r_[np.flatnonzero(s[1:] != s[:-1]), s.size - 1]      # end of each group of equal scores
    tp = np.cumsum(y)[last]
    precision = tp / (last + 1.0)
    recall = tp / float(n_pos)
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


@metric("auprc", summary="Average precision (area under the PR curve, step-wise), binary or OvR macro",
        params={})
class AUPRC(OneVsRest):
    name = "auprc"

    def binary(self, score: np.ndarray, positive: np.ndarray, what: str) -> float:
        return average_precision(score, positive, what)
