"""InfoNCE (van den Oord et al. 2018, "Representation Learning with Contrastive Predictive Coding"),
with in-batch negatives as in SimCLR / CLIP.

Convention: the model output is [B, 2, D]: row i holds two views (z_i, z'_i) of example i. The logits
are s_ij = sim(z_i, z'_j) / temperature over the whole batch, and each row is a B-way classification
whose right answer is its own pair: loss_i = -log softmax_j(s_ij)[i]. With normalize (default) sim is
the cosine; symmetric = true averages both directions (z -> z' and z' -> z), as CLIP does. No target:
the positives are the pairs, the negatives the other examples of the batch (so the loss depends on the
batch, and a micro-batch under gradient accumulation only sees its own negatives).
"""
from __future__ import annotations

from scellis_jupyter.catalog import Param, loss
from scellis_jupyter.catalog.losses import Target, l2_normalize, parts, reduce, reduction_param, refuse
from scellis_jupyter.graph import functional as F


@loss("info_nce", summary="InfoNCE over [B, 2, D] view pairs with in-batch negatives (no target)", params={
    "temperature": Param(float, 0.1, lo=0.0, lo_open=True, doc="divides the similarities"),
    "normalize": Param(bool, True, doc="cosine similarity (else the dot product)"),
    "symmetric": Param(bool, False, doc="average both directions (CLIP)"),
    "reduction": reduction_param(),
})
class InfoNCE:
    def __init__(self, temperature=0.1, normalize=True, symmetric=False, reduction="mean"):
        self.temperature, self.normalize, self.symmetric = temperature, normalize, symmetric
        self.reduction = reduction

    def target(self, out_shape: tuple) -> Target:
        if len(out_shape) != 2 or out_shape[0] != 2:
            raise refuse("info_nce", out_shape, "[2, D] per example (two views)")
        return Target("none")

    def __call__(self, pred, y=None):
        z1, z2 = parts(pred, 2)
        if self.normalize:
            z1, z2 = l2_normalize(z1), l2_normalize(z2)
        s = F.div(F.matmul(z1, F.transpose(z2)), self.temperature)          # [B, B]
        b = pred.shape[0]
        eye = F.cast(F.eq(F.reshape(F.arange(b), (b, 1)), F.reshape(F.arange(b), (1, b))), s.dtype)
        per = F.neg(F.sum_(F.mul(F.log_softmax(s, -1), eye), -1))
        if self.symmetric:
            col = F.neg(F.sum_(F.mul(F.log_softmax(F.transpose(s), -1), eye), -1))
            per = F.mul(F.add(per, col), 0.5)
        return reduce(per, self.reduction)
