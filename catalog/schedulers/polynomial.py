"""Polynomial decay to 0: base_lr * (1 - min(step, T) / T) ** power (torch's PolynomialLR).

Why: DeepLab's "poly" policy (power 0.9) and, with power 1, linear decay to zero; after T it stays 0.
"""
from __future__ import annotations

from scellis_jupyter.catalog import Param, scheduler
from scellis_jupyter.catalog.schedulers import need_total_steps


@scheduler("polynomial", summary="(1 - step/total_steps) ** power decay to zero", params={
    "total_steps": Param(int, None, lo=1, doc="steps until the LR reaches 0; None = the run's total steps"),
    "power": Param(float, 1.0, lo=0.0, doc="exponent of the decay (1 = linear, 0.9 = DeepLab poly)"),
})
class Polynomial:
    def __init__(self, total_steps=None, power=1.0):
        self.total_steps, self.power = total_steps, power

    def lr(self, step: int, base_lr: float, total_steps: int | None) -> float:
        n = need_total_steps("polynomial", self.total_steps, total_steps)
        return base_lr * (1.0 - min(n, step) / n) ** self.power
