"""F1, the harmonic mean of precision and recall, 2 tp / (2 tp + fp + fn), averaged as scikit-learn's f1_score
does (from the confusion counts)."""
from __future__ import annotations

from scellis_jupyter.catalog import metric
from scellis_jupyter.catalog.metrics import AVERAGE_PARAMS, AveragedRatio


@metric("f1", summary="F1 2 tp / (2 tp + fp + fn), macro/micro/weighted/binary", params=AVERAGE_PARAMS)
class F1(AveragedRatio):
    name = ratio = "f1"
