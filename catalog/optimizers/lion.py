"""Lion (Chen et al., 2023, "Symbolic Discovery of Optimization Algorithms"), Algorithm 2.

Why it is cheap: one momentum buffer and a sign update, so every coordinate moves by exactly lr
(plus decoupled decay); the buffer interpolation for the update uses beta1, the one kept uses beta2.
"""
from __future__ import annotations

from scellis_jupyter.catalog import Param, StateDecl, optimizer
from scellis_jupyter.graph import functional as F
from scellis_jupyter.graph.node import Node


@optimizer("lion", summary="Lion (Chen et al. 2023): sign of interpolated momentum, decoupled decay", params={
    "lr": Param(float, 1e-4, lo=0.0, doc="step size; typically 3-10x smaller than AdamW's"),
    "betas": Param(tuple, (0.9, 0.99), lo=0.0, hi=1.0, hi_open=True, length=2,
                   doc="beta1 interpolates the update, beta2 the kept momentum"),
    "weight_decay": Param(float, 0.0, lo=0.0, doc="decoupled: p -= lr * weight_decay * p"),
})
class Lion:
    def __init__(self, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0):
        self.lr, self.betas, self.weight_decay = lr, tuple(betas), weight_decay

    def state(self, shape: tuple, dtype: str) -> list[StateDecl]:
        return [StateDecl("m", shape, "f64" if dtype == "f64" else "f32")]

    def update(self, p: Node, g: Node, state: dict[str, Node], step: Node, lr: Node) -> tuple[Node, dict[str, Node]]:
        c = state["m"].dtype
        x, g, lr = F.cast(p, c), F.cast(g, c), F.cast(lr, c)
        b1, b2 = self.betas
        m = state["m"]
        u = F.sign(F.add(F.mul(m, b1), F.mul(g, 1.0 - b1)))           # c_t = b1 m + (1 - b1) g
        if self.weight_decay:
            u = F.add(u, F.mul(x, self.weight_decay))
        x = F.sub(x, F.mul(lr, u))                                      # theta -= lr (sign(c_t) + wd theta)
        m = F.add(F.mul(m, b2), F.mul(g, 1.0 - b2))
        return F.cast(x, p.dtype), {"m": m}
