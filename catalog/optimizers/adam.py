"""Adam (Kingma & Ba, 2015) with torch.optim.Adam's semantics, so float64 runs match PyTorch.

Why torch's form: weight_decay is L2 added to the gradient (not decoupled: that is AdamW), the bias
corrections divide the step size and sqrt(v) as torch does, and AMSGrad keeps the running max of v.
"""
from __future__ import annotations

from scellis_jupyter.catalog import Param, StateDecl, optimizer
from scellis_jupyter.graph import functional as F
from scellis_jupyter.graph.node import Node


@optimizer("adam", summary="Adam (Kingma & Ba 2015), torch.optim.Adam semantics; L2 weight decay", params={
    "lr": Param(float, 1e-3, lo=0.0, doc="step size (the scheduled value arrives as the lr node)"),
    "betas": Param(tuple, (0.9, 0.999), lo=0.0, hi=1.0, hi_open=True, length=2, doc="EMA rates of m and v"),
    "eps": Param(float, 1e-8, lo=0.0, doc="added to sqrt(v_hat)"),
    "weight_decay": Param(float, 0.0, lo=0.0, doc="L2 penalty added to the gradient"),
    "amsgrad": Param(bool, False, doc="use the running max of v (Reddi et al. 2018)"),
})
class Adam:
    def __init__(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False):
        self.lr, self.betas, self.eps = lr, tuple(betas), eps
        self.weight_decay, self.amsgrad = weight_decay, amsgrad

    def state(self, shape: tuple, dtype: str) -> list[StateDecl]:
        s = "f64" if dtype == "f64" else "f32"          # state is kept at least in f32
        names = ["m", "v"] + (["vmax"] if self.amsgrad else [])
        return [StateDecl(n, shape, s) for n in names]

    def update(self, p: Node, g: Node, state: dict[str, Node], step: Node, lr: Node) -> tuple[Node, dict[str, Node]]:
        c = state["m"].dtype
        x, g, t, lr = F.cast(p, c), F.cast(g, c), F.cast(step, c), F.cast(lr, c)
        b1, b2 = self.betas
        if self.weight_decay:
            g = F.add(g, F.mul(x, self.weight_decay))
        m = F.add(state["m"], F.mul(F.sub(g, state["m"]), 1.0 - b1))
        v = F.add(F.mul(state["v"], b2), F.mul(F.mul(g, g), 1.0 - b2))
        new = {"m": m, "v": v}
        if self.amsgrad:
            v = new["vmax"] = F.maximum(state["vmax"], v)
        bc1 = F.sub(1.0, F.pow_(b1, t))
        bc2 = F.sub(1.0, F.pow_(b2, t))
        denom = F.add(F.div(F.sqrt(v), F.sqrt(bc2)), self.eps)
        x = F.sub(x, F.mul(F.div(lr, bc1), F.div(m, denom)))
        return F.cast(x, p.dtype), new
