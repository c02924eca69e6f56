"""Prodigy (Mishchenko & Defazio, 2023), Algorithm 3: D-adaptation of Adam's step size.

What is implemented (gamma_k = the scheduled lr, typically 1.0; beta3 = sqrt(beta2) unless given):
  m = b1 m + (1 - b1) d g;   v = b2 v + (1 - b2) d^2 g^2
  r = b3 r + (1 - b3) lr d^2 <g, p0 - p>;   s = b3 s + (1 - b3) lr d^2 g
  d_new = max(d, min(d_coef * r / ||s||_1, growth_rate * d))
  p -= lr d m / (sqrt(v) + d eps)     (uses d from before this step, as in the paper)
State: p0 (the parameter at step 1, captured there), s, m, v, and the scalars r and d (d starts at d0,
via init_state). Deviation from the paper: the sums <g, p0 - p> and ||s||_1 run over this parameter
tensor only, because updates are per parameter, so d is estimated per tensor rather than globally.
weight_decay is decoupled (p -= lr d weight_decay p), as the authors' code does; 0 by default.
"""
from __future__ import annotations

import math

import numpy as np

from scellis_jupyter.catalog import Param, StateDecl, optimizer
from scellis_jupyter.graph import functional as F
from scellis_jupyter.graph.node import Node


@optimizer("prodigy", summary="Prodigy (Mishchenko & Defazio 2023): Adam with a D-adapted step size", params={
    "lr": Param(float, 1.0, lo=0.0, doc="gamma_k: multiplies the adapted step; keep 1.0 (schedules allowed)"),
    "betas": Param(tuple, (0.9, 0.999), lo=0.0, hi=1.0, hi_open=True, length=2, doc="EMA rates of m and v"),
    "beta3": Param(float, None, lo=0.0, hi=1.0, hi_open=True, doc="EMA rate of r and s; None: sqrt(beta2)"),
    "eps": Param(float, 1e-8, lo=0.0, doc="added to sqrt(v), scaled by d"),
    "weight_decay": Param(float, 0.0, lo=0.0, doc="decoupled: p -= lr d weight_decay p"),
    "d0": Param(float, 1e-6, lo=0.0, lo_open=True, doc="initial estimate of the distance to the solution"),
    "d_coef": Param(float, 1.0, lo=0.0, lo_open=True, doc="multiplies the d estimate"),
    "growth_rate": Param(float, math.inf, lo=1.0, inf_ok=True, doc="d grows at most by this factor per step"),
})
class Prodigy:
    def __init__(self, lr=1.0, betas=(0.9, 0.999), beta3=None, eps=1e-8, weight_decay=0.0, d0=1e-6, d_coef=1.0,
                 growth_rate=math.inf):
        self.lr, self.betas, self.eps, self.weight_decay = lr, tuple(betas), eps, weight_decay
        self.beta3 = math.sqrt(self.betas[1]) if beta3 is None else beta3
        self.d0, self.d_coef, self.growth_rate = d0, d_coef, growth_rate

    def state(self, shape: tuple, dtype: str) -> list[StateDecl]:
        s = "f64" if dtype == "f64" else "f32"
        return [StateDecl(n, shape, s) for n in ("p0", "s", "m", "v")] + [StateDecl("r", (), s),
                                                                            StateDecl("d", (), s)]

    def init_state(self, shape: tuple, dtype: str) -> dict[str, np.ndarray]:
        return {"d": np.full((), self.d0, np.float64 if dtype == "f64" else np.float32)}

    def update(self, p: Node, g: Node, state: dict[str, Node], step: Node, lr: Node) -> tuple[Node, dict[str, Node]]:
        c = state["m"].dtype
        x, g, t, lr = F.cast(p, c), F.cast(g, c), F.cast(step, c), F.cast(lr, c)
        b1, b2 = self.betas
        b3 = self.beta3
        d = state["d"]
        p0 = F.where(F.eq(t, 1.0), x, state["p0"])                       # x0 is the parameter at step 1
        m = F.add(F.mul(state["m"], b1), F.mul(F.mul(g, d), 1.0 - b1))
        v = F.add(F.mul(state["v"], b2), F.mul(F.mul(F.mul(g, g), F.mul(d, d)), 1.0 - b2))
        lrd2 = F.mul(lr, F.mul(d, d))
        r = F.add(F.mul(state["r"], b3), F.mul(F.mul(lrd2, F.sum_(F.mul(g, F.sub(p0, x)))), 1.0 - b3))
        s = F.add(F.mul(state["s"], b3), F.mul(F.mul(g, lrd2), 1.0 - b3))
        s1 = F.sum_(F.abs_(s))
        ok = F.gt(s1, 0.0)
        d_hat = F.where(ok, F.div(F.mul(r, self.d_coef), F.where(ok, s1, 1.0)), 0.0)
        if math.isfinite(self.growth_rate):
            d_hat = F.minimum(d_hat, F.mul(d, self.growth_rate))
        d_new = F.maximum(d, d_hat)
        if self.weight_decay:
            x = F.sub(x, F.mul(F.mul(F.mul(lr, d), self.weight_decay), x))
        x = F.sub(x, F.mul(F.mul(lr, d), F.div(m, F.add(F.sqrt(v), F.mul(d, self.eps)))))
        return F.cast(x, p.dtype), {"p0": p0, "s": s, "m": m, "v": v, "r": r, "d": d_new}
