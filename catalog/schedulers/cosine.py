"""Cosine annealing (Loshchilov & Hutter 2017, SGDR without restarts), with an optional linear warmup.

Why these conventions: without warmup the value is torch's CosineAnnealingLR,
min_lr + (base_lr - min_lr) * (1 + cos(pi * t / T)) / 2, continued as the same cosine past T (so it
rises again, as torch's does); with warmup_steps W it is Hugging Face's cosine-with-warmup: base_lr * t / W
for t < W, then the cosine over the remaining T - W steps. For the LLM-style recipe that floors at a
fraction of the peak and holds there, use `warmup_cosine`.
"""
from __future__ import annotations

import math

from scellis_jupyter.catalog import CatalogError, Param, scheduler
from scellis_jupyter.catalog.schedulers import need_total_steps


@scheduler("cosine", summary="cosine annealing from base_lr to min_lr over total_steps, optional warmup", params={
    "total_steps": Param(int, None, lo=1, doc="steps of warmup + cosine (T_max); None = the run's total steps"),
    "warmup_steps": Param(int, 0, lo=0, doc="linear warmup from 0 before the cosine starts"),
    "min_lr": Param(float, 0.0, lo=0.0, doc="the LR the cosine ends at (absolute, torch's eta_min)"),
})
class Cosine:
    def __init__(self, total_steps=None, warmup_steps=0, min_lr=0.0):
        self.total_steps, self.warmup_steps, self.min_lr = total_steps, warmup_steps, min_lr

    def lr(self, step: int, base_lr: float, total_steps: int | None) -> float:
        n = need_total_steps("cosine", self.total_steps, total_steps)
        w = self.warmup_steps
        if w >= n:
            raise CatalogError(f"warmup_steps={w} leaves no steps for the cosine (total_steps={n})",
                               where="scheduler cosine", hint="use warmup_steps < total_steps")
        if step < w:
            return base_lr * step / w
        return self.min_lr + (base_lr - self.min_lr) * (1 + math.cos(math.pi * (step - w) / (n - w))) / 2
