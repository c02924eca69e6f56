"""Step decay: base_lr * gamma ** (step // step_size) (torch's StepLR, counted in optimizer steps).

Why: the classic ImageNet ResNet recipe (He et al. 2016: x0.1 at epochs 30 and 60 of 90); when step_size
is None it is derived the same way, a third of the run, so two drops happen inside it.
"""
from __future__ import annotations

from scellis_jupyter.catalog import Param, scheduler
from scellis_jupyter.catalog.schedulers import need_total_steps


@scheduler("step", summary="multiply the LR by gamma every step_size steps", params={
    "step_size": Param(int, None, lo=1, doc="steps between drops; None = a third of the run's total steps"),
    "gamma": Param(float, 0.1, lo=0.0, doc="factor applied at each drop"),
})
class Step:
    def __init__(self, step_size=None, gamma=0.1):
        self.step_size, self.gamma = step_size, gamma

    def lr(self, step: int, base_lr: float, total_steps: int | None) -> float:
        size = self.step_size
        if size is None:
            size = max(1, need_total_steps("step", None, total_steps, param="step_size") // 3)
        return base_lr * self.gamma ** (step // size)
