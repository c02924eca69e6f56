"""Drops by gamma at given milestones: base_lr * gamma ** (number of milestones <= step) (torch's MultiStepLR).

Why: the CIFAR/ImageNet recipes that drop at fixed points (e.g. 50% and 75% of training); milestones=None
derives exactly those two from the run's length. A milestone listed twice drops twice, as in torch.
"""
from __future__ import annotations

import bisect

from scellis_jupyter.catalog import CatalogError, Param, scheduler
from scellis_jupyter.catalog.schedulers import need_total_steps


@scheduler("multistep", summary="multiply the LR by gamma at each milestone step", params={
    "milestones": Param(tuple, None, lo=0.0, doc="optimizer steps at which the LR drops; None = 50% and 75% of the run"),
    "gamma": Param(float, 0.1, lo=0.0, doc="factor applied at each milestone"),
})
class MultiStep:
    def __init__(self, milestones=None, gamma=0.1):
        if milestones is not None:
            bad = [m for m in milestones if float(m) != int(m)]
            if bad:
                raise CatalogError(f"milestones must be whole optimizer steps, got {bad}",
                                   where="scheduler multistep", hint="e.g. milestones=(3000, 4500)")
            milestones = tuple(sorted(int(m) for m in milestones))
        self.milestones, self.gamma = milestones, gamma

    def lr(self, step: int, base_lr: float, total_steps: int | None) -> float:
        ms = self.milestones
        if ms is None:
            n = need_total_steps("multistep", None, total_steps, param="milestones")
            ms = (n // 2, (3 * n) // 4)
        return base_lr * self.gamma ** bisect.bisect_right(ms, step)
