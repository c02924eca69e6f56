"""Count, mean and variance of per-sample values from per-shard moments (Chan et al.'s pairwise update)."""
from __future__ import annotations

import numpy as np

from scellis_jupyter.catalog import reducer


@reducer("moments", summary="n, mean, variance and standard error of the samples of every shard (float64)")
class Moments:
    def leaf(self, index, result):
        n = int(result["n"])
        if n < 1:
            raise ValueError(f"shard {index} reports {n} samples")
        return (n, np.asarray(result["mean"], np.float64), np.asarray(result["m2"], np.float64))

    def combine(self, a, b):
        (na, ma, qa), (nb, mb, qb) = a, b
        if ma.shape != mb.shape:
            raise ValueError(f"shard estimates of shapes {ma.shape} and {mb.shape} cannot be combined")
        n = na + nb
        d = mb - ma
        return (n, ma + d * (nb / n), qa + qb + d * d * (na * nb / n))

    def finish(self, acc):
        n, mean, m2 = acc
        var = m2 / (n - 1) if n > 1 else np.zeros_like(m2)
        return {"n": n, "mean": mean, "var": var, "stderr": np.sqrt(var / n) if n else var}
