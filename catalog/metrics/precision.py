"""Precision tp / (tp + fp), averaged as scikit-learn's precision_score does (from the confusion counts)."""
from __future__ import annotations

from scellis_jupyter.catalog import metric
from scellis_jupyter.catalog.metrics import AVERAGE_PARAMS, AveragedRatio


@metric("precision", summary="Precision tp / (tp + fp), macro/micro/weighted/binary", params=AVERAGE_PARAMS)
class Precision(AveragedRatio):
    name = ratio = "precision"
