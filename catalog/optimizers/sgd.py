"""SGD with momentum, dampening, Nesterov and L2 weight decay, with torch.optim.SGD's semantics.

Why torch's form: the first step sets the momentum buffer to the gradient itself (no dampening), later
steps use buf = momentum * buf + (1 - dampening) * g; Nesterov adds momentum * buf to the gradient.
"""
from __future__ import annotations

from scellis_jupyter.catalog import CatalogError, Param, StateDecl, optimizer
from scellis_jupyter.graph import functional as F
from scellis_jupyter.graph.node import Node


@optimizer("sgd", summary="SGD with momentum / dampening / Nesterov / L2 weight decay (torch.optim.SGD)", params={
    "lr": Param(float, 1e-3, lo=0.0, doc="step size (the scheduled value arrives as the lr node)"),
    "momentum": Param(float, 0.0, lo=0.0, doc="momentum factor; 0 keeps no state"),
    "dampening": Param(float, 0.0, lo=0.0, hi=1.0, doc="scales the gradient entering the buffer"),
    "weight_decay": Param(float, 0.0, lo=0.0, doc="L2 penalty added to the gradient"),
    "nesterov": Param(bool, False, doc="Nesterov momentum (needs momentum > 0, dampening 0)"),
})
class SGD:
    def __init__(self, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
        if nesterov and (momentum <= 0 or dampening != 0):
            raise CatalogError("Nesterov momentum needs momentum > 0 and dampening = 0",
                               where="catalog optimizer 'sgd'", hint="set momentum=0.9, dampening=0.0")
        self.lr, self.momentum, self.dampening = lr, momentum, dampening
        self.weight_decay, self.nesterov = weight_decay, nesterov

    def state(self, shape: tuple, dtype: str) -> list[StateDecl]:
        return [StateDecl("momentum", shape, "f64" if dtype == "f64" else "f32")] if self.momentum else []

    def update(self, p: Node, g: Node, state: dict[str, Node], step: Node, lr: Node) -> tuple[Node, dict[str, Node]]:
        c = "f64" if p.dtype == "f64" else "f32"
        x, g, t, lr = F.cast(p, c), F.cast(g, c), F.cast(step, c), F.cast(lr, c)
        if self.weight_decay:
            g = F.add(g, F.mul(x, self.weight_decay))
        new = {}
        if self.momentum:
            buf = F.add(F.mul(state["momentum"], self.momentum), F.mul(g, 1.0 - self.dampening))
            buf = new["momentum"] = F.where(F.eq(t, 1.0), g, buf)      # step 1: the buffer is the gradient
            g = F.add(g, F.mul(buf, self.momentum)) if self.nesterov else buf
        x = F.sub(x, F.mul(lr, g))
        return F.cast(x, p.dtype), new
