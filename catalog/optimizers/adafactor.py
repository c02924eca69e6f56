"""Adafactor (Shazeer & Stern, 2018), Algorithms 4 and 5, with the options commonly used around it.

Why factored: for a parameter of rank >= 2 the second moment of the last two axes is kept as a row
vector and a column vector of means of g^2 + eps1 (V_hat = R C / mean(R)), so the state is O(n + m)
instead of O(n m); vectors and scalars keep an unfactored v. Each step:
  beta2_hat = 1 - t^decay_rate;  U = g / sqrt(V_hat);  U /= max(1, RMS(U) / clip_threshold)
  optional first moment (beta1) on the clipped U;  p -= alpha U with
  alpha = max(eps2, RMS(p)) * rho if scale_parameter else rho.
rho: with relative_step, min(cap, 1/sqrt(t)) where cap is the scheduled lr if lr was given, else 1e-2
(the paper), or 1e-6 t with warmup_init; without relative_step, rho is the scheduled lr.
relative_step defaults to on only when lr is None ("relative step off by default when lr is given");
scale_parameter defaults to relative_step. weight_decay is decoupled, p *= 1 - lr' * weight_decay with
lr' the scheduled lr (or rho when lr is None), applied after RMS(p) is taken, as torch.optim.Adafactor
does; with lr=1e-2, relative_step=True, beta1=None this entry is torch.optim.Adafactor up to where eps1
enters (the paper adds it to g^2; torch clamps V_hat), which the tests check in float64.
"""
from __future__ import annotations

from scellis_jupyter.catalog import Param, StateDecl, optimizer
from scellis_jupyter.graph import functional as F
from scellis_jupyter.graph.node import Node


@optimizer("adafactor", summary="Adafactor (Shazeer & Stern 2018): factored second moments, update clipping",
           params={
    "lr": Param(float, None, lo=0.0, doc="None: relative step size min(1e-2, 1/sqrt(t))"),
    "eps": Param(tuple, (1e-30, 1e-3), lo=0.0, length=2, doc="(eps1 added to g^2, eps2 floor of RMS(p))"),
    "clip_threshold": Param(float, 1.0, lo=0.0, lo_open=True, doc="d: update clipping threshold on RMS(U)"),
    "decay_rate": Param(float, -0.8, hi=0.0, doc="beta2_hat = 1 - t^decay_rate"),
    "beta1": Param(float, None, lo=0.0, hi=1.0, hi_open=True, doc="first moment on U; None keeps none"),
    "weight_decay": Param(float, 0.0, lo=0.0, doc="decoupled decay p *= 1 - lr * weight_decay"),
    "scale_parameter": Param(bool, None, doc="scale the step by max(eps2, RMS(p)); None: = relative_step"),
    "relative_step": Param(bool, None, doc="rho = min(cap, 1/sqrt(t)); None: on iff lr is None"),
    "warmup_init": Param(bool, False, doc="relative step cap 1e-6 t instead of 1e-2"),
})
class Adafactor:
    def __init__(self, lr=None, eps=(1e-30, 1e-3), clip_threshold=1.0, decay_rate=-0.8, beta1=None,
                 weight_decay=0.0, scale_parameter=None, relative_step=None, warmup_init=False):
        self.lr, self.eps, self.clip_threshold, self.decay_rate = lr, tuple(eps), clip_threshold, decay_rate
        self.beta1, self.weight_decay, self.warmup_init = beta1, weight_decay, warmup_init
        self.relative_step = (lr is None) if relative_step is None else relative_step
        self.scale_parameter = self.relative_step if scale_parameter is None else scale_parameter

    @staticmethod
    def factored(shape: tuple) -> bool:
        return len(shape) >= 2

    def state(self, shape: tuple, dtype: str) -> list[StateDecl]:
        s = "f64" if dtype == "f64" else "f32"
        shape = tuple(shape)
        out = ([StateDecl("row", shape[:-1], s), StateDecl("col", shape[:-2] + shape[-1:], s)]
               if self.factored(shape) else [StateDecl("v", shape, s)])
        return out + ([StateDecl("m", shape, s)] if self.beta1 is not None else [])

    def update(self, p: Node, g: Node, state: dict[str, Node], step: Node, lr: Node) -> tuple[Node, dict[str, Node]]:
        c = "f64" if p.dtype == "f64" else "f32"
        x, g, t, lr = F.cast(p, c), F.cast(g, c), F.cast(step, c), F.cast(lr, c)
        eps1, eps2 = self.eps
        if self.relative_step:
            cap = F.mul(t, 1e-6) if self.warmup_init else (lr if self.lr is not None else 1e-2)
            rho = F.minimum(cap, F.rsqrt(t))
        else:
            rho = lr
        alpha = F.mul(F.maximum(_rms(x), eps2), rho) if self.scale_parameter else rho
        w = F.pow_(t, self.decay_rate)                                   # 1 - beta2_hat
        g2 = F.add(F.mul(g, g), eps1)
        new = {}
        if self.factored(tuple(p.shape)):
            row = F.add(F.mul(state["row"], F.sub(1.0, w)), F.mul(F.mean(g2, -1), w))
            col = F.add(F.mul(state["col"], F.sub(1.0, w)), F.mul(F.mean(g2, -2), w))
            new["row"], new["col"] = row, col
            r = F.div(row, F.mean(row, -1, keepdims=True))               # R / mean(R)
            vhat = F.mul(F.reshape(r, r.shape + (1,)), F.reshape(col, col.shape[:-1] + (1,) + col.shape[-1:]))
        else:
            vhat = new["v"] = F.add(F.mul(state["v"], F.sub(1.0, w)), F.mul(g2, w))
        u = F.mul(g, F.rsqrt(vhat))
        u = F.div(u, F.maximum(F.div(_rms(u), self.clip_threshold), 1.0))
        if self.beta1 is not None:
            u = new["m"] = F.add(F.mul(state["m"], self.beta1), F.mul(u, 1.0 - self.beta1))
        if self.weight_decay:
            x = F.mul(x, F.sub(1.0, F.mul(lr if self.lr is not None else rho, self.weight_decay)))
        x = F.sub(x, F.mul(alpha, u))
        return F.cast(x, p.dtype), new


def _rms(x: Node) -> Node:
    return F.sqrt(F.mean(F.mul(x, x)))
