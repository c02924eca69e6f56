"""Weight decay for any optimizer: L2 (coupled) or decoupled (Loshchilov & Hutter 2019).

Spec: regularizers = [{ name = "weight_decay", decay = 1e-4, mode = "l2" }] in [recipe]; `targets`
(globs over parameter names) picks the weights, default every weight matrix (role 'weight': not biases,
norms or embeddings). mode "l2" adds decay * w to each gradient just before the optimizer, which is the
gradient of the penalty decay/2 ||w||^2 and exactly torch.optim's `weight_decay` argument (so after
gradient clipping, as there). mode "decoupled" subtracts lr * decay * w_before from the optimizer's
update (lr as scheduled), which is AdamW's decay for any optimizer.
"""
from __future__ import annotations

import fnmatch

from scellis_jupyter.catalog import CatalogError, Param, regularizer
from scellis_jupyter.catalog.regularizers import Regularization
from scellis_jupyter.graph import functional as F


@regularizer("weight_decay", summary="L2 or decoupled weight decay, any optimizer", params={
    "decay": Param(float, 1e-2, lo=0.0, doc="the coefficient"),
    "mode": Param(str, "l2", choices=("l2", "decoupled"), doc="l2: g += decay w; decoupled: w -= lr decay w"),
    "targets": Param(list, None, optional=True, doc="globs over parameter names; default every weight matrix"),
})
class WeightDecay:
    def __init__(self, decay=1e-2, mode="l2", targets=None):
        if targets is not None and not all(isinstance(t, str) and t for t in targets):
            raise CatalogError("targets must be parameter-name globs", where="catalog regularizer 'weight_decay'")
        self.decay, self.mode, self.targets = decay, mode, targets

    def apply(self, ctx) -> Regularization:
        params = ctx.graph.params
        if self.targets is None:
            chosen = {p.name for p in params if p.role == "weight"}
        else:
            chosen = {p.name for p in params if any(fnmatch.fnmatchcase(p.name, t) for t in self.targets)}
            if not chosen:
                from scellis_jupyter.errors import did_you_mean
                raise CatalogError(f"targets {self.targets} match no parameter",
                                   where="catalog regularizer 'weight_decay'",
                                   hint=did_you_mean(self.targets[0], [p.name for p in params])
                                   or f"parameters: {', '.join(p.name for p in params)}")
        d = self.decay
        info = {"decay": d, "mode": self.mode, "params": sorted(chosen)}
        if self.mode == "l2":
            def hook(name, g, w):
                return F.add(g, F.mul(F.cast(w, g.dtype), d)) if name in chosen else g
            return Regularization(grad_hook=hook, info=info)

        def decay(name, new, old, lr):
            if name not in chosen:
                return new
            return F.sub(new, F.mul(F.mul(F.cast(lr, new.dtype), d), F.cast(old, new.dtype)))
        return Regularization(decay=decay, info=info)
