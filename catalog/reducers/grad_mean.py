"""The batch-mean loss and gradients from per-slice means: sum of n_i * value_i in float64, over the total n."""
from __future__ import annotations

import numpy as np

from scellis_jupyter.catalog import reducer


@reducer("grad_mean", summary="data-parallel gradients: per-slice means weighted by slice size, float64 sums")
class GradMean:
    def leaf(self, index, result):
        n = int(result["n"])        # one pass: widened and scaled in the same ufunc (the bits of n * float64(v))
        return {"n": n, "loss": n * float(result["loss"]),
                "grads": {k: np.multiply(v, n, dtype=np.float64) for k, v in result["grads"].items()}}

    def combine(self, a, b):
        if set(a["grads"]) != set(b["grads"]):
            raise ValueError(f"slices disagree on the parameters: {sorted(set(a['grads']) ^ set(b['grads']))}")
        return {"n": a["n"] + b["n"], "loss": a["loss"] + b["loss"],
                "grads": {k: a["grads"][k] + b["grads"][k] for k in sorted(a["grads"])}}

    def finish(self, acc):
        n = acc["n"]
        # divided in float64 and rounded once into the float32 result (the bits of (v / n).astype(float32))
        return {"n": n, "loss": acc["loss"] / n,
                "grads": {k: np.divide(v, n, out=np.empty(np.shape(v), np.float32), casting="same_kind")
                          for k, v in acc["grads"].items()}}
