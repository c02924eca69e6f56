"""Pieces optimizer entries share: the state dtype rule, the common hyperparameter declarations, and the
Adam family (torch.optim.Adam's moments and bias-corrected step) that Adam and AdamW differ from only in
how weight decay enters.

Why here: entries are ordinary files written against the public catalog API, so what two of them have
in common lives where both can import it (`from scellis_jupyter.catalog.optimizers import AdamFamily`).
"""
from __future__ import annotations

import abc

from ..graph import functional as F
from ..graph.node import Node
from .registry import Param, StateDecl

__all__ = ["state_dtype", "lr_param", "BETAS", "AdamFamily", "adam_params"]


def state_dtype(dtype: str) -> str:
    """Optimizer state is f64 for f64 parameters, else at least f32 (f16 parameters keep f32 state)."""
    return "f64" if dtype == "f64" else "f32"


def lr_param(default: float, doc: str = "step size (the scheduled value arrives as the lr node)") -> Param:
    return Param(float, default, lo=0.0, doc=doc)


BETAS = Param(tuple, (0.9, 0.999), lo=0.0, hi=1.0, hi_open=True, length=2, doc="EMA rates of m and v")


def adam_params(weight_decay: Param) -> dict:
    """Adam's and AdamW's declarations; they differ in weight_decay's default and meaning."""
    return {"lr": lr_param(1e-3), "betas": BETAS, "eps": Param(float, 1e-8, lo=0.0, doc="added to sqrt(v_hat)"),
            "weight_decay": weight_decay,
            "amsgrad": Param(bool, False, doc="use the running max of v (Reddi et al. 2018)")}


class AdamFamily(abc.ABC):
    """torch.optim.Adam's update: m, v (and vmax with AMSGrad) in f32 or f64, the bias corrections dividing
    the step size and sqrt(v) as torch does. Subclasses define `decay(x, g, lr) -> (x, g)`, applied
    when weight_decay is not 0: L2 into the gradient (Adam) or decoupled from it (AdamW)."""

    def __init__(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False):
        self.lr, self.betas, self.eps = lr, tuple(betas), eps
        self.weight_decay, self.amsgrad = weight_decay, amsgrad

    def state(self, shape: tuple, dtype: str) -> list[StateDecl]:
        names = ["m", "v"] + (["vmax"] if self.amsgrad else [])
        return [StateDecl(n, shape, state_dtype(dtype)) for n in names]

    @abc.abstractmethod
    def decay(self, x: Node, g: Node, lr: Node) -> tuple[Node, Node]:
        """Weight decay as (new x, new g): L2 into the gradient or decoupled from it."""

    def update(self, p: Node, g: Node, state: dict[str, Node], step: Node, lr: Node) -> tuple[Node, dict[str, Node]]:
        c = state["m"].dtype
        x, g, t, lr = F.cast(p, c), F.cast(g, c), F.cast(step, c), F.cast(lr, c)
        b1, b2 = self.betas
        if self.weight_decay:
            x, g = self.decay(x, g, lr)
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
