"""The 1cycle policy (Smith & Topin 2018, "Super-Convergence"), torch's OneCycleLR for the LR.

Why: warm up from max_lr / div_factor to max_lr over pct_start of the run, then anneal to
max_lr / (div_factor * final_div_factor); three_phase=True is the paper's original shape (up, back down to
the initial LR symmetrically, then the final annihilation). Phase boundaries follow torch: phase one ends
at step pct_start * T - 1. Past the last step (T - 1) the LR stays at the final value. Momentum cycling is
the optimizer's business and is not done here.
"""
from __future__ import annotations

import math

from scellis_jupyter.catalog import Param, scheduler
from scellis_jupyter.catalog.schedulers import need_total_steps


def _cos(start: float, end: float, pct: float) -> float:
    return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)


def _linear(start: float, end: float, pct: float) -> float:
    return (end - start) * pct + start


@scheduler("one_cycle", summary="1cycle: warm up to max_lr, then anneal far below the start", params={
    "max_lr": Param(float, None, lo=0.0, doc="peak LR; None = the run's base_lr"),
    "total_steps": Param(int, None, lo=1, doc="length of the cycle; None = the run's total steps"),
    "pct_start": Param(float, 0.3, lo=0.0, hi=1.0, doc="fraction of the cycle spent increasing the LR"),
    "anneal": Param(str, "cos", choices=("cos", "linear"), doc="shape of each phase"),
    "div_factor": Param(float, 25.0, lo=0.0, lo_open=True, doc="initial LR = max_lr / div_factor"),
    "final_div_factor": Param(float, 1e4, lo=0.0, lo_open=True, doc="final LR = initial LR / final_div_factor"),
    "three_phase": Param(bool, False, doc="the paper's three phases instead of fastai's two"),
})
class OneCycle:
    def __init__(self, max_lr=None, total_steps=None, pct_start=0.3, anneal="cos", div_factor=25.0,
                 final_div_factor=1e4, three_phase=False):
        self.max_lr, self.total_steps, self.pct_start, self.anneal = max_lr, total_steps, pct_start, anneal
        self.div_factor, self.final_div_factor, self.three_phase = div_factor, final_div_factor, three_phase

    def lr(self, step: int, base_lr: float, total_steps: int | None) -> float:
        n = need_total_steps("one_cycle", self.total_steps, total_steps)
        peak = base_lr if self.max_lr is None else self.max_lr
        initial = peak / self.div_factor
        final = initial / self.final_div_factor
        up = float(self.pct_start * n) - 1
        if self.three_phase:
            phases = [(up, initial, peak), (float(2 * self.pct_start * n) - 2, peak, initial),
                      (n - 1, initial, final)]
        else:
            phases = [(up, initial, peak), (n - 1, peak, final)]
        anneal = _cos if self.anneal == "cos" else _linear
        if step >= n - 1:
            return final
        begin = 0.0
        for i, (end, lo, hi) in enumerate(phases):
            if step <= end or i == len(phases) - 1:
                pct = (step - begin) / (end - begin) if end > begin else 1.0
                return anneal(lo, hi, min(max(pct, 0.0), 1.0))
            begin = end
        return final  # not reached
