"""Cyclical learning rates (Smith 2017, "Cyclical Learning Rates for Training Neural Networks"), torch's CyclicLR.

Why: the LR sweeps between base_lr and max_lr in triangles of step_size_up + step_size_down steps;
triangular2 halves the amplitude every cycle, exp_range scales it by gamma ** step. Defaults: base_lr is the
run's LR and max_lr four times it (the paper, §3.3, finds a max/min ratio of 3-4 works). The LR finder in
`scellis_jupyter.run.lr_finder` is the paper's way to pick both bounds.
"""
from __future__ import annotations

import math

from scellis_jupyter.catalog import CatalogError, Param, scheduler


@scheduler("cyclic", summary="CLR: triangular cycles between base_lr and max_lr", params={
    "base_lr": Param(float, None, lo=0.0, doc="lower bound; None = the run's base_lr"),
    "max_lr": Param(float, None, lo=0.0, doc="upper bound; None = 4 x the lower bound"),
    "step_size_up": Param(int, 2000, lo=1, doc="steps from base_lr up to max_lr"),
    "step_size_down": Param(int, None, lo=1, doc="steps back down; None = step_size_up"),
    "mode": Param(str, "triangular", choices=("triangular", "triangular2", "exp_range"), doc="amplitude policy"),
    "gamma": Param(float, 1.0, lo=0.0, hi=1.0, doc="exp_range: amplitude x gamma ** step"),
})
class Cyclic:
    def __init__(self, base_lr=None, max_lr=None, step_size_up=2000, step_size_down=None, mode="triangular",
                 gamma=1.0):
        if base_lr is not None and max_lr is not None and max_lr < base_lr:
            raise CatalogError(f"max_lr={max_lr} is below base_lr={base_lr}", where="scheduler cyclic",
                               hint="max_lr is the upper bound of the cycle")
        self.base_lr, self.max_lr, self.mode, self.gamma = base_lr, max_lr, mode, gamma
        self.up = float(step_size_up)
        self.down = float(step_size_down) if step_size_down is not None else self.up
        self.step_size_up, self.step_size_down = step_size_up, step_size_down

    def lr(self, step: int, base_lr: float, total_steps: int | None) -> float:
        lo = base_lr if self.base_lr is None else self.base_lr
        hi = 4.0 * lo if self.max_lr is None else self.max_lr
        size = self.up + self.down
        ratio = self.up / size
        cycle = math.floor(1 + step / size)
        x = 1.0 + step / size - cycle                      # position in the cycle, [0, 1)
        height = x / ratio if x <= ratio else (x - 1) / (ratio - 1)
        if self.mode == "triangular":
            scale = 1.0
        elif self.mode == "triangular2":
            scale = 1 / (2.0 ** (cycle - 1))
        else:
            scale = self.gamma ** step
        return lo + (hi - lo) * height * scale
