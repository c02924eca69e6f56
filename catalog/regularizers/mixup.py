"""mixup (Zhang et al. 2018, "mixup: Beyond Empirical Risk Minimization"): train on
x~ = lam x + (1 - lam) x[perm] with the loss lam L(pred, y) + (1 - lam) L(pred, y[perm]).

Spec: regularizers = [{ name = "mixup", alpha = 0.2 }] in [recipe] (prob = 0.5 mixes half the steps).
lam ~ Beta(alpha, alpha) and the permutation of the batch are drawn on the host from the Philox `augment`
stream (one word for lam, one for the prob gate, one per example for the permutation) and fed to the
step as inputs `reg:mixup.lam` and `reg:mixup.perm`, so one compiled step serves every step and a
resumed run replays the same mixes. The loss form equals mixing one-hot targets for any loss linear in
its target (cross-entropy), and is what the paper's code does; it works for every loss with a target.
"""
from __future__ import annotations

import numpy as np

from scellis_jupyter.catalog import CatalogError, Param, regularizer
from scellis_jupyter.catalog.regularizers import (Regularization, StepInput, beta, blend, mixed_targets,
                                                  permutation, uniform)


@regularizer("mixup", summary="mixup (Zhang et al. 2018): convex combinations of example pairs, Beta(alpha, alpha)",
             params={
                 "alpha": Param(float, 0.2, lo=0.0, lo_open=True, doc="lam ~ Beta(alpha, alpha)"),
                 "prob": Param(float, 1.0, lo=0.0, hi=1.0, doc="fraction of steps that mix (others: lam = 1)"),
             })
class Mixup:
    def __init__(self, alpha=0.2, prob=1.0):
        self.alpha, self.prob = alpha, prob

    def apply(self, ctx) -> Regularization:
        if ctx.target is None or ctx.target.kind == "none":
            raise CatalogError("mixup needs a loss with a target (it mixes y too)",
                               where="catalog regularizer 'mixup'", hint="drop mixup for this loss")
        if ctx.input_dtype not in ("f32", "f16"):
            raise CatalogError(f"mixup mixes float inputs; this model's input is {ctx.input_dtype}",
                               where="catalog regularizer 'mixup'", hint="mix embeddings in a model of your own")
        b = ctx.batch

        def draw(stream):
            lam = beta(stream, self.alpha)
            if uniform(stream, 1)[0] >= self.prob:
                lam = 1.0
            return {"lam": np.float32(lam), "perm": permutation(stream, b)}

        def mix(x, y, inputs):
            lam, perm = inputs["lam"], inputs["perm"]
            return blend(x, perm, lam), mixed_targets(y, perm, lam)
        return Regularization(inputs=[StepInput("lam", (), "f32"), StepInput("perm", (b,), "i32")], draw=draw,
                              mix=mix, info={"alpha": self.alpha, "prob": self.prob})
