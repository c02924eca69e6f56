"""Adafactor (Shazeer & Stern, 2018) with torch.optim.Adafactor's meaning of lr and eps, plus HF's options.

Why factored: for a parameter of rank >= 2 the second moment of the last two axes is kept as a row
vector and a column vector of means of g^2, so the state is O(n + m) instead of O(n m); vectors and
scalars keep an unfactored v. Each step, as torch.optim.Adafactor (2.x) does it:
  w = t^decay_rate (1 - beta2_hat);  R += w (mean_-1(g^2) - R);  C += w (mean_-2(g^2) - C)
  V_hat = R C / max(mean(R), eps1)   (vectors: v += w (g^2 - v), V_hat = v)
  U = g / sqrt(max(V_hat, eps1^2));  U /= max(1, RMS(U) / clip_threshold)
  rho = min(lr, 1/sqrt(t));  alpha = max(eps2, RMS(p)) rho;  p *= 1 - lr weight_decay;  p -= alpha U
lr is the scheduled value: it caps the relative step (the paper's constant 1e-2 is the default), as
`torch.optim.Adafactor(lr=...)` does; giving lr does not turn the relative step off.
eps1 defaults to the machine epsilon of the parameter's dtype (torch's eps=(None, 1e-3)) and is applied
where torch applies it, not added to g^2 as in the paper: in f32, 1e-30 added to g^2 leaves R and C at
1e-30 for rows and columns whose gradient is always zero (dead units, constant-zero pixels), their
product underflows to 0 and 0 * rsqrt(0) made the whole update NaN.
Options beyond torch (HF transformers' names), all off by default: relative_step=False uses rho = lr;
scale_parameter=False drops the max(eps2, RMS(p)) factor; warmup_init uses rho = min(1e-6 t, 1/sqrt(t));
beta1 keeps a first moment of the clipped U.
"""
from __future__ import annotations

import numpy as np

from scellis_jupyter import dtypes
from scellis_jupyter.catalog import Param, StateDecl, optimizer
from scellis_jupyter.graph import functional as F
from scellis_jupyter.graph.node import Node


@optimizer("adafactor", summary="Adafactor (Shazeer & Stern 2018), torch.optim.Adafactor semantics: factored "
                                "second moments, update clipping, relative step capped by lr", params={
    "lr": Param(float, 1e-2, lo=0.0, doc="caps the relative step min(lr, 1/sqrt(t)) (torch's meaning); "
                                         "also the weight-decay rate"),
    "eps": Param(tuple, None, lo=0.0, length=2, optional=True,
                 doc="(eps1 floor of sqrt(V_hat) and mean(R), eps2 floor of RMS(p)); None: (the dtype's "
                     "machine epsilon, 1e-3), torch's (None, 1e-3)"),
    "clip_threshold": Param(float, 1.0, lo=0.0, lo_open=True, doc="d: update clipping threshold on RMS(U)"),
    "decay_rate": Param(float, -0.8, hi=0.0, doc="beta2_hat = 1 - t^decay_rate (torch's beta2_decay)"),
    "beta1": Param(float, None, lo=0.0, hi=1.0, hi_open=True, doc="first moment on U; None keeps none"),
    "weight_decay": Param(float, 0.0, lo=0.0, doc="decoupled decay p *= 1 - lr * weight_decay"),
    "scale_parameter": Param(bool, True, doc="scale the step by max(eps2, RMS(p))"),
    "relative_step": Param(bool, True, doc="rho = min(lr, 1/sqrt(t)); False: rho = lr"),
    "warmup_init": Param(bool, False, doc="with relative_step: rho = min(1e-6 t, 1/sqrt(t)), lr unused"),
})
class Adafactor:
    def __init__(self, lr=1e-2, eps=None, clip_threshold=1.0, decay_rate=-0.8, beta1=None, weight_decay=0.0,
                 scale_parameter=True, relative_step=True, warmup_init=False):
        self.lr, self.eps, self.clip_threshold, self.decay_rate = lr, eps, clip_threshold, decay_rate
        self.beta1, self.weight_decay, self.warmup_init = beta1, weight_decay, warmup_init
        self.relative_step, self.scale_parameter = relative_step, scale_parameter

    @staticmethod
    def factored(shape: tuple) -> bool:
        return len(shape) >= 2

    def epsilons(self, dtype: str) -> tuple[float, float]:
        """(eps1, eps2) for parameters of this dtype."""
        return tuple(self.eps) if self.eps is not None else (float(np.finfo(dtypes.to_numpy(dtype)).eps), 1e-3)

    def state(self, shape: tuple, dtype: str) -> list[StateDecl]:
        s = "f64" if dtype == "f64" else "f32"
        shape = tuple(shape)
        out = ([StateDecl("row", shape[:-1], s), StateDecl("col", shape[:-2] + shape[-1:], s)]
               if self.factored(shape) else [StateDecl("v", shape, s)])
        return out + ([StateDecl("m", shape, s)] if self.beta1 is not None else [])

    def update(self, p: Node, g: Node, state: dict[str, Node], step: Node, lr: Node) -> tuple[Node, dict[str, Node]]:
        c = "f64" if p.dtype == "f64" else "f32"
        x, g, t, lr = F.cast(p, c), F.cast(g, c), F.cast(step, c), F.cast(lr, c)
        eps1, eps2 = self.epsilons(c)
        if self.relative_step:
            rho = F.minimum(F.mul(t, 1e-6) if self.warmup_init else lr, F.rsqrt(t))
        else:
            rho = lr
        alpha = F.mul(F.maximum(_rms(x), eps2), rho) if self.scale_parameter else rho
        if self.weight_decay:
            x = F.mul(x, F.sub(1.0, F.mul(lr, self.weight_decay)))
        w = F.pow_(t, self.decay_rate)                                   # 1 - beta2_hat
        g2 = F.mul(g, g)
        new = {}
        if self.factored(tuple(p.shape)):
            row = new["row"] = _lerp(state["row"], F.mean(g2, -1), w)
            col = new["col"] = _lerp(state["col"], F.mean(g2, -2), w)
            outer = F.mul(F.reshape(row, row.shape + (1,)), F.reshape(col, col.shape[:-1] + (1,) + col.shape[-1:]))
            vhat = F.div(outer, F.reshape(F.maximum(F.mean(row, -1), eps1), row.shape[:-1] + (1, 1)))
        else:
            vhat = new["v"] = _lerp(state["v"], g2, w)
        u = F.mul(F.rsqrt(F.maximum(vhat, eps1 * eps1)), g)
        u = F.div(u, F.maximum(F.div(_rms(u), self.clip_threshold), 1.0))
        if self.beta1 is not None:
            u = new["m"] = F.add(F.mul(state["m"], self.beta1), F.mul(u, 1.0 - self.beta1))
        x = F.sub(x, F.mul(alpha, u))
        return F.cast(x, p.dtype), new


def _lerp(a: Node, b: Node, w: Node) -> Node:
    """a + w (b - a), torch's lerp_ (exactly b at w = 1, the first step)."""
    return F.add(a, F.mul(F.sub(b, a), w))


def _rms(x: Node) -> Node:
    return F.sqrt(F.mean(F.mul(x, x)))
