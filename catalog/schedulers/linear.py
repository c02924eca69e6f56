"""Linear change of the LR multiplier from start_factor to end_factor over total_steps, then held.

Why: the default "linear decay to zero" of BERT-style fine-tuning; with start_factor < end_factor it is a
linear warmup. The value at step t is base_lr * (s + (e - s) * min(t, T) / T), torch's LinearLR.
"""
from __future__ import annotations

from scellis_jupyter.catalog import Param, scheduler
from scellis_jupyter.catalog.schedulers import need_total_steps


@scheduler("linear", summary="linear from start_factor to end_factor x base_lr over total_steps", params={
    "start_factor": Param(float, 1.0, lo=0.0, hi=1.0, lo_open=True, doc="multiplier at step 0"),
    "end_factor": Param(float, 0.0, lo=0.0, hi=1.0, doc="multiplier from step total_steps on"),
    "total_steps": Param(int, None, lo=1, doc="length of the ramp; None = the run's total steps"),
})
class Linear:
    def __init__(self, start_factor=1.0, end_factor=0.0, total_steps=None):
        self.start_factor, self.end_factor, self.total_steps = start_factor, end_factor, total_steps

    def lr(self, step: int, base_lr: float, total_steps: int | None) -> float:
        n = need_total_steps("linear", self.total_steps, total_steps)
        s, e = self.start_factor, self.end_factor
        return base_lr * (s + (e - s) * min(n, step) / n)
