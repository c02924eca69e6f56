"""Zeros: the default for biases and layer-norm shifts (layers declare init="zeros")."""
from __future__ import annotations

import numpy as np

from scellis_jupyter.catalog import initializer


@initializer("zeros", summary="All zeros (biases, norm shifts)", params={})
class Zeros:
    random = False

    def __call__(self, shape: tuple, fan_in: int, fan_out: int, stream, name: str = "") -> np.ndarray:
        return np.zeros(tuple(shape), np.float32)
