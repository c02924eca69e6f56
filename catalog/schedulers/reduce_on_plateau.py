"""Reduce the LR by `factor` when a validation metric stops improving (torch's ReduceLROnPlateau).

Why it is stateful, and how it stays a function of the step: `observe(value, step)` runs torch's rule
(best so far with a rel/abs threshold, `patience` bad observations, `cooldown` after a reduction) and
records the optimizer step after which each reduction fired. `lr(step, ...)` replays the reductions that
fired before `step` from base_lr (new = max(old * factor, min_lr), skipped when it changes the LR by at
most eps), so it needs no copy of the LR and resumes exactly from `state_dict`. `step` in `observe` is
the index of the last optimizer step taken before the metric was measured: a reduction applies from
step + 1 on.
"""
from __future__ import annotations

import math

from scellis_jupyter.catalog import Param, scheduler


@scheduler("reduce_on_plateau", summary="x factor when the observed metric has not improved for patience checks",
           params={
    "mode": Param(str, "min", choices=("min", "max"), doc="whether lower or higher metric values are better"),
    "factor": Param(float, 0.1, lo=0.0, hi=1.0, hi_open=True, doc="new_lr = lr * factor"),
    "patience": Param(int, 10, lo=0, doc="observations without improvement tolerated before a reduction"),
    "threshold": Param(float, 1e-4, lo=0.0, doc="minimum change that counts as an improvement"),
    "threshold_mode": Param(str, "rel", choices=("rel", "abs"), doc="threshold relative to best, or absolute"),
    "cooldown": Param(int, 0, lo=0, doc="observations ignored after a reduction"),
    "min_lr": Param(float, 0.0, lo=0.0, doc="lower bound of the LR"),
    "eps": Param(float, 1e-8, lo=0.0, doc="a reduction changing the LR by at most eps is skipped"),
})
class ReduceOnPlateau:
    def __init__(self, mode="min", factor=0.1, patience=10, threshold=1e-4, threshold_mode="rel", cooldown=0,
                 min_lr=0.0, eps=1e-8):
        self.mode, self.factor, self.patience, self.threshold = mode, factor, patience, threshold
        self.threshold_mode, self.cooldown, self.min_lr, self.eps = threshold_mode, cooldown, min_lr, eps
        self.best: float | None = None          # None: nothing observed yet (torch: +-inf)
        self.bad = 0
        self.cooldown_left = 0
        self.reductions: list[int] = []         # steps after which a reduction fired, ascending

    def _better(self, a: float, best: float | None) -> bool:
        if best is None:                         # torch's "mode_worse" start: +inf for min, -inf for max
            best = math.inf if self.mode == "min" else -math.inf
        if self.mode == "min":
            return a < (best * (1.0 - self.threshold) if self.threshold_mode == "rel" else best - self.threshold)
        return a > (best * (self.threshold + 1.0) if self.threshold_mode == "rel" else best + self.threshold)

    def observe(self, value: float, step: int) -> None:
        value = float(value)
        if self._better(value, self.best):
            self.best, self.bad = value, 0
        else:
            self.bad += 1
        if self.cooldown_left > 0:
            self.cooldown_left -= 1
            self.bad = 0
        if self.bad > self.patience:
            self.reductions.append(max([int(step)] + self.reductions[-1:]))
            self.cooldown_left, self.bad = self.cooldown, 0

    def lr(self, step: int, base_lr: float, total_steps: int | None) -> float:
        lr = base_lr
        for s in self.reductions:
            if s >= step:
                break
            new = max(lr * self.factor, self.min_lr)
            if lr - new > self.eps:
                lr = new
        return lr

    def state_dict(self) -> dict:
        best = self.best if self.best is None or math.isfinite(self.best) else str(self.best)  # strict JSON
        return {"best": best, "bad": self.bad, "cooldown_left": self.cooldown_left,
                "reductions": list(self.reductions)}

    def load_state_dict(self, d: dict) -> None:
        self.best = None if d["best"] is None else float(d["best"])
        self.bad, self.cooldown_left = int(d["bad"]), int(d["cooldown_left"])
        self.reductions = [int(s) for s in d["reductions"]]
