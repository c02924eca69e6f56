"""The element-wise mean of array results (an ensemble's averaged predictions), as sum and count."""
from __future__ import annotations

import numpy as np

from scellis_jupyter.catalog import reducer


@reducer("mean", summary="element-wise mean of the shard results (float64 accumulation)")
class Mean:
    def leaf(self, index, result):
        return (np.asarray(result, dtype=np.float64), 1)

    def combine(self, a, b):
        if a[0].shape != b[0].shape:
            raise ValueError(f"shard results of shapes {a[0].shape} and {b[0].shape} cannot be averaged")
        return (a[0] + b[0], a[1] + b[1])

    def finish(self, acc):
        return acc[0] / acc[1]
