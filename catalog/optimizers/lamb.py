"""LAMB (You et al., 2020, "Large Batch Optimization for Deep Learning"), Algorithm 2.

Why a per-tensor trust ratio: the Adam-style direction r + wd * p is rescaled by ||p|| / ||r + wd * p||
of the whole parameter tensor (a layer), so each layer moves by about lr of its own norm. phi is the
identity; the ratio is 1 where either norm is zero. Bias correction follows the paper (switchable).
"""
from __future__ import annotations

from scellis_jupyter.catalog import Param, StateDecl, optimizer
from scellis_jupyter.graph import functional as F
from scellis_jupyter.graph.node import Node


@optimizer("lamb", summary="LAMB (You et al. 2020): Adam direction scaled by a per-tensor trust ratio", params={
    "lr": Param(float, 1e-3, lo=0.0, doc="step size (the scheduled value arrives as the lr node)"),
    "betas": Param(tuple, (0.9, 0.999), lo=0.0, hi=1.0, hi_open=True, length=2, doc="EMA rates of m and v"),
    "eps": Param(float, 1e-6, lo=0.0, doc="added to sqrt(v_hat)"),
    "weight_decay": Param(float, 0.0, lo=0.0, doc="lambda: added to the direction before the trust ratio"),
    "bias_correction": Param(bool, True, doc="divide m and v by 1 - beta^t as in the paper"),
})
class LAMB:
    def __init__(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0, bias_correction=True):
        self.lr, self.betas, self.eps = lr, tuple(betas), eps
        self.weight_decay, self.bias_correction = weight_decay, bias_correction

    def state(self, shape: tuple, dtype: str) -> list[StateDecl]:
        s = "f64" if dtype == "f64" else "f32"
        return [StateDecl("m", shape, s), StateDecl("v", shape, s)]

    def update(self, p: Node, g: Node, state: dict[str, Node], step: Node, lr: Node) -> tuple[Node, dict[str, Node]]:
        c = state["m"].dtype
        x, g, t, lr = F.cast(p, c), F.cast(g, c), F.cast(step, c), F.cast(lr, c)
        b1, b2 = self.betas
        m = F.add(F.mul(state["m"], b1), F.mul(g, 1.0 - b1))
        v = F.add(F.mul(state["v"], b2), F.mul(F.mul(g, g), 1.0 - b2))
        mh, vh = m, v
        if self.bias_correction:
            mh = F.div(m, F.sub(1.0, F.pow_(b1, t)))
            vh = F.div(v, F.sub(1.0, F.pow_(b2, t)))
        u = F.div(mh, F.add(F.sqrt(vh), self.eps))
        if self.weight_decay:
            u = F.add(u, F.mul(x, self.weight_decay))
        pn = F.sqrt(F.sum_(F.mul(x, x)))
        un = F.sqrt(F.sum_(F.mul(u, u)))
        ok = F.gt(F.minimum(pn, un), 0.0)
        trust = F.where(ok, F.div(pn, F.where(ok, un, 1.0)), 1.0)
        x = F.sub(x, F.mul(F.mul(lr, trust), u))
        return F.cast(x, p.dtype), {"m": m, "v": v}
