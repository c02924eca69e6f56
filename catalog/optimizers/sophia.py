"""Sophia-G (Liu et al., 2023, "Sophia: A Scalable Stochastic Second-order Optimizer"), Algorithm 3.

What is implemented, exactly:
  m_t = beta1 m_{t-1} + (1 - beta1) g_t
  every k steps (t = 1, k+1, 2k+1, ...):  h_t = beta2 h_{t-k} + (1 - beta2) B * g_hat (.) g_hat
  otherwise h_t = h_{t-1}
  p *= 1 - lr * weight_decay;   p -= lr * clip(m_t / max(rho * h_t, eps), 1)
The paper's Gauss-Newton-Bartlett estimator takes g_hat from a mini-batch whose labels are sampled from
the model's own predictions; a per-parameter update sees only the training gradient, so here g_hat is
approximated by the given gradient g (B = batch_size). A trainer that does compute sampled-label
gradients can set hessian_every=0 (update() then never refreshes h) and replace state['h'] with
`hessian_update(h, g_hat)` every k steps instead. No Hutchinson estimator is implemented.
"""
from __future__ import annotations

from scellis_jupyter.catalog import Param, StateDecl, optimizer
from scellis_jupyter.graph import functional as F
from scellis_jupyter.graph.node import Node


@optimizer("sophia", summary="Sophia-G (Liu et al. 2023): clipped m / (rho h), GNB-style diagonal Hessian EMA",
           params={
    "lr": Param(float, 1e-4, lo=0.0, doc="step size; each coordinate moves at most lr"),
    "betas": Param(tuple, (0.965, 0.99), lo=0.0, hi=1.0, hi_open=True, length=2,
                   doc="EMA rates of m and of the Hessian estimate h"),
    "rho": Param(float, 0.04, lo=0.0, lo_open=True, doc="gamma in the paper: scales h in the denominator"),
    "eps": Param(float, 1e-15, lo=0.0, lo_open=True, doc="floor of the denominator"),
    "weight_decay": Param(float, 0.1, lo=0.0, doc="decoupled: p *= 1 - lr * weight_decay"),
    "hessian_every": Param(int, 10, lo=0, doc="k: refresh h at steps 1, k+1, ...; 0 leaves h to the trainer"),
    "batch_size": Param(int, 1, lo=1, doc="B in the GNB estimate B * g_hat^2"),
})
class Sophia:
    def __init__(self, lr=1e-4, betas=(0.965, 0.99), rho=0.04, eps=1e-15, weight_decay=0.1, hessian_every=10,
                 batch_size=1):
        self.lr, self.betas, self.rho, self.eps = lr, tuple(betas), rho, eps
        self.weight_decay, self.hessian_every, self.batch_size = weight_decay, hessian_every, batch_size

    def state(self, shape: tuple, dtype: str) -> list[StateDecl]:
        s = "f64" if dtype == "f64" else "f32"
        return [StateDecl("m", shape, s), StateDecl("h", shape, s)]

    def hessian_update(self, h: Node, g_hat: Node) -> Node:
        """h <- beta2 h + (1 - beta2) B g_hat^2: the GNB refresh, for trainers with sampled-label gradients."""
        g_hat = F.cast(g_hat, h.dtype)
        return F.add(F.mul(h, self.betas[1]), F.mul(F.mul(g_hat, g_hat), (1.0 - self.betas[1]) * self.batch_size))

    def update(self, p: Node, g: Node, state: dict[str, Node], step: Node, lr: Node) -> tuple[Node, dict[str, Node]]:
        c = state["m"].dtype
        x, g, t, lr = F.cast(p, c), F.cast(g, c), F.cast(step, c), F.cast(lr, c)
        b1 = self.betas[0]
        m = F.add(F.mul(state["m"], b1), F.mul(g, 1.0 - b1))
        h = state["h"]
        k = self.hessian_every
        if k == 1:
            h = self.hessian_update(h, g)
        elif k > 1:
            # (t - 1) mod k == 0, tested with a tolerance: f32 division on a GPU is not exactly rounded
            q = F.div(F.sub(t, 1.0), float(k))
            nearest = F.cast(F.cast(F.add(q, 0.5), "i32"), c)
            h = F.where(F.lt(F.abs_(F.sub(q, nearest)), 0.5 / k), self.hessian_update(h, g), h)
        if self.weight_decay:
            x = F.mul(x, F.sub(1.0, F.mul(lr, self.weight_decay)))
        ratio = F.clamp(F.div(m, F.maximum(F.mul(h, self.rho), self.eps)), -1.0, 1.0)
        x = F.sub(x, F.mul(lr, ratio))
        return F.cast(x, p.dtype), {"m": m, "h": h}
