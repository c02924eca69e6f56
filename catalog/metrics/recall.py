"""Recall tp / (tp + fn), averaged as scikit-learn's recall_score does (from the confusion counts)."""
from __future__ import annotations

from scellis_jupyter.catalog import metric
from scellis_jupyter.catalog.metrics import AVERAGE_PARAMS, AveragedRatio


@metric("recall", summary="Recall tp / (tp + fn), macro/micro/weighted/binary", params=AVERAGE_PARAMS)
class Recall(AveragedRatio):
    name = ratio = "recall"
