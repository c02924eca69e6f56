"""SGDR: cosine annealing with warm restarts (Loshchilov & Hutter 2017), torch's CosineAnnealingWarmRestarts.

Why: each restart jumps back to base_lr, and with T_mult > 1 cycle i lasts T_0 * T_mult**i steps. The
position inside the current cycle is found by walking whole cycles in integers, so there is no
floating-point log at cycle boundaries.
"""
from __future__ import annotations

import math

from scellis_jupyter.catalog import Param, scheduler


@scheduler("cosine_restarts", summary="SGDR: cosine annealing with warm restarts every T_0 * T_mult**i steps",
           params={
    "T_0": Param(int, 10, lo=1, doc="steps of the first cycle"),
    "T_mult": Param(int, 1, lo=1, doc="each cycle is T_mult times longer than the previous"),
    "eta_min": Param(float, 0.0, lo=0.0, doc="the LR at the end of each cycle (absolute)"),
})
class CosineRestarts:
    def __init__(self, T_0=10, T_mult=1, eta_min=0.0):  # noqa: N803 - the paper's names
        self.T_0, self.T_mult, self.eta_min = T_0, T_mult, eta_min

    def lr(self, step: int, base_lr: float, total_steps: int | None) -> float:
        t_cur, t_i = step, self.T_0
        if self.T_mult == 1:
            t_cur = step % t_i
        else:
            while t_cur >= t_i:
                t_cur -= t_i
                t_i *= self.T_mult
        return self.eta_min + (base_lr - self.eta_min) * (1 + math.cos(math.pi * t_cur / t_i)) / 2
