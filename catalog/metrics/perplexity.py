"""Perplexity: exp of the mean token cross-entropy, over (N, C) or (N, T, C) logits.

Why a sum and a count as state: the mean over all tokens of all batches (not a mean of batch means), so
batches of different length weigh by their tokens; `ignore_index` targets (padding) are not tokens.
"""
from __future__ import annotations

import numpy as np

from scellis_jupyter.catalog import CatalogError, Param, metric
from scellis_jupyter.catalog.metrics import Accumulator, as_targets, log_softmax


@metric("perplexity", summary="Perplexity exp(mean token cross-entropy), padding skipped", params={
    "ignore_index": Param(int, -100, doc="targets equal to this are skipped (padding)"),
})
class Perplexity(Accumulator):
    name = "perplexity"
    higher_is_better = False
    summed = ("nll", "tokens")

    def __init__(self, ignore_index=-100):
        self.ignore_index = ignore_index
        self.reset()

    def update(self, pred: np.ndarray, target: np.ndarray) -> None:
        z = np.asarray(pred.numpy() if hasattr(pred, "numpy") and not isinstance(pred, np.ndarray) else pred)
        t = np.asarray(target.numpy() if hasattr(target, "numpy") and not isinstance(target, np.ndarray)
                       else target)
        if z.ndim not in (2, 3) or t.shape != z.shape[:-1] or z.shape[-1] < 1:
            raise CatalogError(f"logits of shape {tuple(z.shape)} and targets of shape {tuple(t.shape)} do not "
                               f"fit", where="metric perplexity",
                               hint="give logits (N, C) with targets (N,), or (N, T, C) with targets (N, T)")
        if z.dtype.kind not in "fiu":
            raise CatalogError(f"logits of dtype {z.dtype} are not numbers", where="metric perplexity")
        z = z.astype(np.float64).reshape(-1, z.shape[-1])
        if np.isnan(z).any():
            raise CatalogError(f"logits of shape {tuple(np.shape(pred))} contain NaN", where="metric perplexity",
                               hint="the model diverged or its input has NaN; check the loss curve")
        t = as_targets(self, t, z.shape[1], tuple(np.shape(pred)), self.ignore_index).reshape(-1)
        keep = t != self.ignore_index
        lp = log_softmax(z[keep], axis=1)
        nll = -np.sum(lp[np.arange(lp.shape[0]), t[keep]])
        self._add(nll=np.array(nll, np.float64), tokens=np.array(int(keep.sum()), np.int64))

    def compute(self) -> float:
        st = self._require()
        if st["tokens"] == 0:
            raise CatalogError("perplexity of zero tokens (all targets are ignore_index)",
                               where="metric perplexity", hint=f"ignore_index is {self.ignore_index}")
        with np.errstate(over="ignore"):       # a diverged model has perplexity inf, not an error
            return float(np.exp(float(st["nll"]) / float(st["tokens"])))
