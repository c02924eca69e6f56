"""AUROC: area under the ROC curve; binary, or one-vs-rest macro average for more than two classes.

Why keep every score (concatenated state) rather than a binned curve: the area is then exact, equal to
scikit-learn's roc_auc_score on all the data; it is computed as the Mann-Whitney statistic with tied
scores counted one half, which is the trapezoidal area under the ROC curve.
"""
from __future__ import annotations

import numpy as np

from scellis_jupyter.catalog import CatalogError, metric
from scellis_jupyter.catalog.metrics import OneVsRest, average_ranks


def binary_auroc(score: np.ndarray, positive: np.ndarray, what: str) -> float:
    n_pos = int(positive.sum())
    n_neg = positive.size - n_pos
    if n_pos == 0 or n_neg == 0:
        raise CatalogError(f"AUROC is undefined for {what}: it has {n_pos} positive and {n_neg} negative "
                           f"samples", where="metric auroc", hint="evaluate on data with both outcomes present")
    ranks = average_ranks(score)
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


@metric("auroc", summary="Area under the ROC curve (binary, or one-vs-rest macro)", params={})
class AUROC(OneVsRest):
    name = "auroc"

    def binary(self, score: np.ndarray, positive: np.ndarray, what: str) -> float:
        return binary_auroc(score, positive, what)
