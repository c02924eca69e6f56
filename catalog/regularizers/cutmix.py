"""CutMix (Yun et al. 2019, "CutMix: Regularization Strategy to Train Strong Classifiers with Localizable
Features"): paste a box of x[perm] into x and weight the losses by the pasted area.

Spec: regularizers = [{ name = "cutmix", alpha = 1.0 }] in [recipe]; the model input needs two spatial
axes last (e.g. [1, 8, 8]). As in the paper's code: lam ~ Beta(alpha, alpha); the box has sides
int(H sqrt(1 - lam)) and int(W sqrt(1 - lam)) around a uniform centre (cy, cx), clipped to the image
(half-sides by integer division); lam is then set to 1 - box area / (H W); the loss is
lam L(pred, y) + (1 - lam) L(pred, y[perm]). lam, the permutation and the box (as a 0/1 mask of the
image, 1 = keep the example's own pixels) are drawn on the host from the Philox `augment` stream (words:
lam, prob gate, cy, cx, then one per example) and fed as step inputs, so a resumed run replays them.
"""
from __future__ import annotations

import math

import numpy as np

from scellis_jupyter.catalog import CatalogError, Param, regularizer
from scellis_jupyter.catalog.regularizers import (Regularization, StepInput, beta, blend, integer, mixed_targets,
                                                  permutation, uniform)


def box(h: int, w: int, lam: float, cy: int, cx: int) -> tuple[int, int, int, int]:
    """(y1, y2, x1, x2) of the cut, as the paper's rand_bbox computes it."""
    rat = math.sqrt(1.0 - lam)
    ch, cw = int(h * rat), int(w * rat)
    return (min(max(cy - ch // 2, 0), h), min(max(cy + ch // 2, 0), h),
            min(max(cx - cw // 2, 0), w), min(max(cx + cw // 2, 0), w))


@regularizer("cutmix", summary="CutMix (Yun et al. 2019): paste a box from another example, area-weighted loss",
             params={
                 "alpha": Param(float, 1.0, lo=0.0, lo_open=True, doc="lam ~ Beta(alpha, alpha) before the box"),
                 "prob": Param(float, 1.0, lo=0.0, hi=1.0, doc="fraction of steps that cut (others: no box)"),
             })
class CutMix:
    def __init__(self, alpha=1.0, prob=1.0):
        self.alpha, self.prob = alpha, prob

    def apply(self, ctx) -> Regularization:
        where = "catalog regularizer 'cutmix'"
        if ctx.target is None or ctx.target.kind == "none":
            raise CatalogError("cutmix needs a loss with a target", where=where, hint="drop cutmix for this loss")
        if len(ctx.input_shape) < 2 or ctx.input_dtype not in ("f32", "f16"):
            raise CatalogError(f"cutmix cuts boxes from images: the input needs two spatial axes last, got "
                               f"{list(ctx.input_shape)} ({ctx.input_dtype})", where=where,
                               hint='declare the input as an image, e.g. input = { shape = [1, 8, 8] }')
        b = ctx.batch
        h, w = ctx.input_shape[-2:]

        def draw(stream):
            lam = beta(stream, self.alpha)
            gate = uniform(stream, 1)[0]
            cy, cx = integer(stream, h), integer(stream, w)
            perm = permutation(stream, b)
            mask = np.ones((h, w), np.float32)
            if gate < self.prob:
                y1, y2, x1, x2 = box(h, w, lam, cy, cx)
                mask[y1:y2, x1:x2] = 0.0
            lam_adj = float(mask.sum()) / (h * w)
            return {"lam": np.float32(lam_adj), "perm": perm, "mask": mask}

        def mix(x, y, inputs):
            lam, perm = inputs["lam"], inputs["perm"]
            return blend(x, perm, inputs["mask"]), mixed_targets(y, perm, lam)
        return Regularization(inputs=[StepInput("lam", (), "f32"), StepInput("perm", (b,), "i32"),
                                      StepInput("mask", (h, w), "f32")], draw=draw, mix=mix,
                              info={"alpha": self.alpha, "prob": self.prob})
