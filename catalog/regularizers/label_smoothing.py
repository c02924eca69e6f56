"""Label smoothing (Szegedy et al. 2016, "Rethinking the Inception Architecture", section 7): train on
(1 - eps) one-hot + eps / C uniform targets.

Spec: regularizers = [{ name = "label_smoothing", eps = 0.1 }] in [recipe]. Why it only sets the loss's
own `label_smoothing`: cross_entropy already computes it exactly as torch does (class weights and
ignore_index included), so this is the same thing said as a regularizer; a loss without that
hyperparameter is refused, and so is setting it in both places.
"""
from __future__ import annotations

from scellis_jupyter.catalog import CatalogError, Param, get, regularizer
from scellis_jupyter.catalog.regularizers import Regularization


@regularizer("label_smoothing", summary="label smoothing (Szegedy et al. 2016) via the loss's label_smoothing",
             params={"eps": Param(float, 0.1, lo=0.0, hi=1.0, doc="weight of the uniform distribution")})
class LabelSmoothing:
    def __init__(self, eps=0.1):
        self.eps = eps

    def apply(self, ctx) -> Regularization:
        where = "catalog regularizer 'label_smoothing'"
        name = getattr(ctx.loss, "name", None)
        params = get("loss", name).params if name is not None else {}
        if "label_smoothing" not in params:
            raise CatalogError(f"label_smoothing needs a loss with a label_smoothing hyperparameter; "
                               f"{name or type(ctx.loss).__name__!r} has none", where=where,
                               hint='use loss = "cross_entropy"')
        if (getattr(ctx.loss, "config", {}) or {}).get("label_smoothing"):
            raise CatalogError("label smoothing is set both on the loss and as a regularizer", where=where,
                               hint="keep one of the two")
        return Regularization(loss_params={"label_smoothing": self.eps}, info={"eps": self.eps})
