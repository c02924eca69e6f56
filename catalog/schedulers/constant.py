"""Constant LR, optionally scaled by `factor` for the first `total_iters` steps (torch's ConstantLR).

Why the factor: a short damped start ("constant warmup", Goyal et al. 2017 §2.2) is the one variation of
a constant rate people use; factor=1 (the default) is the plain constant schedule.
"""
from __future__ import annotations

from scellis_jupyter.catalog import Param, scheduler


@scheduler("constant", summary="constant LR (optionally x factor for the first total_iters steps)", params={
    "factor": Param(float, 1.0, lo=0.0, hi=1.0, doc="multiplier of base_lr while step < total_iters"),
    "total_iters": Param(int, 0, lo=0, doc="steps run at factor * base_lr; 0 = always base_lr"),
})
class Constant:
    def __init__(self, factor=1.0, total_iters=0):
        self.factor, self.total_iters = factor, total_iters

    def lr(self, step: int, base_lr: float, total_steps: int | None) -> float:
        return base_lr * self.factor if step < self.total_iters else base_lr
