"""Cosine embedding loss (torch.nn.functional.cosine_embedding_loss): 1 - cos(x1, x2) for y = +1,
max(0, cos(x1, x2) - margin) for y = -1.

Convention: the model output is [B, 2, D] = the two embeddings per example (e.g. a shared encoder on
an input of [2, features]); the target is one +1 (similar) / -1 (dissimilar) label per example. The
cosine is torch's: x1.x2 / sqrt((|x1|^2 + 1e-12)(|x2|^2 + 1e-12)).
"""
from __future__ import annotations

from scellis_jupyter.catalog import Param, loss
from scellis_jupyter.catalog.losses import Target, as_float, parts, reduce, reduction_param, refuse
from scellis_jupyter.graph import functional as F

EPS = 1e-12


@loss("cosine_embedding", summary="cosine embedding loss over [B, 2, D] pairs with +1/-1 targets", params={
    "margin": Param(float, 0.0, lo=-1.0, hi=1.0, doc="dissimilar pairs are pushed below this cosine"),
    "reduction": reduction_param(),
})
class CosineEmbedding:
    def __init__(self, margin=0.0, reduction="mean"):
        self.margin, self.reduction = margin, reduction

    def target(self, out_shape: tuple) -> Target:
        if len(out_shape) != 2 or out_shape[0] != 2:
            raise refuse("cosine_embedding", out_shape, "[2, D] per example (two embeddings)")
        return Target("sign", ())

    def __call__(self, pred, y):
        x1, x2 = parts(pred, 2)
        y = as_float(y, pred)
        dot = F.sum_(F.mul(x1, x2), -1)
        m1 = F.add(F.sum_(F.mul(x1, x1), -1), EPS)
        m2 = F.add(F.sum_(F.mul(x2, x2), -1), EPS)
        cos = F.div(dot, F.sqrt(F.mul(m1, m2)))
        pos = F.where(F.eq(y, 1.0), F.sub(1.0, cos), 0.0)
        neg = F.where(F.eq(y, -1.0), F.relu(F.sub(cos, self.margin)), 0.0)
        return reduce(F.add(pos, neg), self.reduction)
