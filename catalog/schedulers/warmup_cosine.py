"""Linear warmup then cosine decay to a floor, held after the run: the common LLM pretraining recipe.

Why separate from `cosine`: this is the GPT-3 / LLaMA / nanoGPT shape. Warmup starts at a nonzero LR
(step t < W runs at base_lr * (t + 1) / W, so no step is wasted at 0 and step W - 1 reaches the peak),
the cosine then goes from base_lr to min_lr_ratio * base_lr over steps W .. T, and from T on the LR stays
at the floor instead of rising again. warmup_steps=None derives W from warmup_ratio * T.
"""
from __future__ import annotations

import math

from scellis_jupyter.catalog import CatalogError, Param, scheduler
from scellis_jupyter.catalog.schedulers import need_total_steps


@scheduler("warmup_cosine", summary="linear warmup, cosine decay to min_lr_ratio x base_lr, then held", params={
    "total_steps": Param(int, None, lo=1, doc="warmup + decay steps; None = the run's total steps"),
    "warmup_steps": Param(int, None, lo=0, doc="None = round(warmup_ratio * total_steps)"),
    "warmup_ratio": Param(float, 0.05, lo=0.0, hi=1.0, hi_open=True, doc="used when warmup_steps is None"),
    "min_lr_ratio": Param(float, 0.1, lo=0.0, hi=1.0, doc="the floor as a fraction of base_lr"),
})
class WarmupCosine:
    def __init__(self, total_steps=None, warmup_steps=None, warmup_ratio=0.05, min_lr_ratio=0.1):
        self.total_steps, self.warmup_steps = total_steps, warmup_steps
        self.warmup_ratio, self.min_lr_ratio = warmup_ratio, min_lr_ratio

    def lr(self, step: int, base_lr: float, total_steps: int | None) -> float:
        n = need_total_steps("warmup_cosine", self.total_steps, total_steps)
        w = round(self.warmup_ratio * n) if self.warmup_steps is None else self.warmup_steps
        if w >= n:
            raise CatalogError(f"warmup_steps={w} leaves no steps for the decay (total_steps={n})",
                               where="scheduler warmup_cosine", hint="use warmup_steps < total_steps")
        floor = self.min_lr_ratio * base_lr
        if step < w:
            return base_lr * (step + 1) / w
        if step >= n:
            return floor
        return floor + (base_lr - floor) * 0.5 * (1 + math.cos(math.pi * (step - w) / (n - w)))
