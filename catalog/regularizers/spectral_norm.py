"""Spectral normalization (Miyato et al. 2018): use W / sigma(W), sigma estimated by power iteration
with persistent vectors, as torch.nn.utils.parametrizations.spectral_norm does.

Spec: regularizers = [{ name = "spectral_norm", layers = ["fc1"] }] in [recipe] (node-name globs;
default every weight matrix; a conv weight [O, C, kh, kw] is read as [O, C kh kw]). Each weight W of
shape [out, in] keeps buffers u [out] and v [in] (leaves `<weight>.sn_u`, `<weight>.sn_v`, role
"buffer": non-trained state the planner counts and the checkpoint saves). They start as normalized
Gaussians from the Philox `init` stream followed by 15 power iterations (torch's start). Each training
step first does n_power_iterations of u = normalize(W v), v = normalize(W^T u) without gradient, then
uses W / (u . W v) with the gradient flowing through W only; evaluation uses the stored u, v.
"""
from __future__ import annotations

import math

import numpy as np

from scellis_jupyter.catalog import Param, regularizer
from scellis_jupyter.catalog.losses import l2_normalize
from scellis_jupyter.catalog.regularizers import Buffer, Regularization, weight_params
from scellis_jupyter.graph import functional as F

WHERE = "catalog regularizer 'spectral_norm'"


def _normalize(x, eps):
    return x / max(float(np.linalg.norm(x)), eps)


def power_iterations_np(w: np.ndarray, u: np.ndarray, v: np.ndarray, n: int, eps: float):
    """n steps of u = normalize(W v), v = normalize(W^T u), in float64 (host side, for the start)."""
    w = np.asarray(w, np.float64).reshape(w.shape[0], -1)
    for _ in range(n):
        u = _normalize(w @ v, eps)
        v = _normalize(w.T @ u, eps)
    return u, v


@regularizer("spectral_norm", summary="spectral normalization (Miyato et al. 2018), torch's parametrization",
             params={
                 "layers": Param(list, None, optional=True, doc="node-name globs; default every weight matrix"),
                 "n_power_iterations": Param(int, 1, lo=1, hi=100, doc="power iterations per training step"),
                 "eps": Param(float, 1e-12, lo=0.0, lo_open=True, doc="norm floor in normalize"),
             })
class SpectralNorm:
    def __init__(self, layers=None, n_power_iterations=1, eps=1e-12):
        self.layers, self.n, self.eps = layers, n_power_iterations, eps

    def apply(self, ctx) -> Regularization:
        ws = [p for p in weight_params(ctx.graph, self.layers, WHERE) if p.name in set(ctx.trainable)
              or not ctx.trainable]
        bufs, transforms = [], {}
        for p in ws:
            out, inn = p.shape[0], math.prod(p.shape[1:])
            bufs += [Buffer(p.name, "sn_u", (out,)), Buffer(p.name, "sn_v", (inn,))]
            transforms[p.name] = self._transform(p.shape)

        def init(weights, stream):
            got = {}
            for p in ws:
                out, inn = p.shape[0], math.prod(p.shape[1:])
                u = _normalize(stream.normal((out,)).astype(np.float64), self.eps)
                v = _normalize(stream.normal((inn,)).astype(np.float64), self.eps)
                u, v = power_iterations_np(weights[p.name], u, v, 15, self.eps)
                got[f"{p.name}.sn_u"], got[f"{p.name}.sn_v"] = u.astype(np.float32), v.astype(np.float32)
            return got
        return Regularization(buffers=bufs, init_buffers=init, transforms=transforms,
                              info={"weights": [p.name for p in ws], "n_power_iterations": self.n})

    def _transform(self, shape):
        n, eps = self.n, self.eps

        def fn(w, bufs, training):
            c = "f64" if w.dtype == "f64" else "f32"
            wm = F.reshape(F.cast(w, c), (shape[0], -1))
            u, v = F.cast(bufs["sn_u"], c), F.cast(bufs["sn_v"], c)
            new = {}
            if training:
                for _ in range(n):
                    u = l2_normalize(F.matmul(wm, v), eps)
                    v = l2_normalize(F.matmul(F.transpose(wm), u), eps)
                u, v = F.stop_gradient(u), F.stop_gradient(v)
                new = {"sn_u": F.cast(u, bufs["sn_u"].dtype), "sn_v": F.cast(v, bufs["sn_v"].dtype)}
            sigma = F.sum_(F.mul(u, F.matmul(wm, v)))
            return F.cast(F.div(F.cast(w, c), sigma), w.dtype), new
        return fn
