"""Inverse square root with linear warmup ("Attention Is All You Need", Vaswani et al. 2017, §5.3; fairseq).

Why: the Transformer schedule lr = d_model**-0.5 * min(s**-0.5, s * W**-1.5), s = step + 1, rescaled so the
peak (at s = W) is base_lr: lr = base_lr * min(s / W, sqrt(W / s)). It rises linearly for W steps and then
decays as 1/sqrt(step), never reaching 0, and needs no run length.
"""
from __future__ import annotations

import math

from scellis_jupyter.catalog import Param, scheduler


@scheduler("inverse_sqrt", summary="linear warmup, then base_lr * sqrt(warmup_steps / step)", params={
    "warmup_steps": Param(int, 4000, lo=1, doc="steps to reach base_lr (the paper uses 4000)"),
})
class InverseSqrt:
    def __init__(self, warmup_steps=4000):
        self.warmup_steps = warmup_steps

    def lr(self, step: int, base_lr: float, total_steps: int | None) -> float:
        s, w = step + 1, self.warmup_steps
        return base_lr * min(s / w, math.sqrt(w / s))
