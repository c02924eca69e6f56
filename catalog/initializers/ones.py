"""Ones: the default for norm scales (layers declare init="ones")."""
from __future__ import annotations

import numpy as np

from scellis_jupyter.catalog import initializer


@initializer("ones", summary="All ones (norm scales)", params={})
class Ones:
    random = False

    def __call__(self, shape: tuple, fan_in: int, fan_out: int, stream, name: str = "") -> np.ndarray:
        return np.ones(tuple(shape), np.float32)
