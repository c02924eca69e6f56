"""Exponential decay: base_lr * gamma ** step (torch's ExponentialLR, counted in optimizer steps).

Why: the smooth counterpart of step decay; gamma per optimizer step is close to 1 (0.999 halves the LR
about every 700 steps).
"""
from __future__ import annotations

from scellis_jupyter.catalog import Param, scheduler


@scheduler("exponential", summary="multiply the LR by gamma every optimizer step", params={
    "gamma": Param(float, 0.999, lo=0.0, hi=1.0, lo_open=True, doc="decay per optimizer step"),
})
class Exponential:
    def __init__(self, gamma=0.999):
        self.gamma = gamma

    def lr(self, step: int, base_lr: float, total_steps: int | None) -> float:
        return base_lr * self.gamma ** step
