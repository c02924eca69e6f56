"""Normal N(mean, std^2) (torch.nn.init.normal_'s defaults), from the stream's Box-Muller normals."""
from __future__ import annotations

import numpy as np

from scellis_jupyter.catalog import Param, initializer
from scellis_jupyter.catalog.initializers import finish


@initializer("normal", summary="Normal(mean, std^2)", params={
    "mean": Param(float, 0.0, doc="mean"),
    "std": Param(float, 1.0, lo=0.0, doc="standard deviation"),
})
class Normal:
    random = True

    def __init__(self, mean=0.0, std=1.0):
        self.mean, self.std = mean, std

    def __call__(self, shape: tuple, fan_in: int, fan_out: int, stream, name: str = "") -> np.ndarray:
        return finish(self.mean + self.std * stream.normal(tuple(shape)).astype(np.float64), shape)
