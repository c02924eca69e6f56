"""Linear warmup from start_factor * base_lr to base_lr over warmup_steps, then constant.

Why: large-batch and Adam-family training is unstable in its first steps while the optimizer statistics
are poor (Goyal et al. 2017 "gradual warmup"); this is the schedule to use when no decay is wanted. As in
Hugging Face's constant-with-warmup, step t < warmup_steps runs at base_lr * (s + (1 - s) * t / W), so the
default start_factor=0 makes step 0 run at 0 and step W the first one at base_lr.
"""
from __future__ import annotations

from scellis_jupyter.catalog import Param, scheduler


@scheduler("warmup", summary="linear warmup over warmup_steps, then constant base_lr", params={
    "warmup_steps": Param(int, 100, lo=0, doc="length of the warmup in optimizer steps (0 = none)"),
    "start_factor": Param(float, 0.0, lo=0.0, hi=1.0, doc="multiplier of base_lr at step 0"),
})
class Warmup:
    def __init__(self, warmup_steps=100, start_factor=0.0):
        self.warmup_steps, self.start_factor = warmup_steps, start_factor

    def lr(self, step: int, base_lr: float, total_steps: int | None) -> float:
        if step >= self.warmup_steps:
            return base_lr
        s = self.start_factor
        return base_lr * (s + (1.0 - s) * step / self.warmup_steps)
