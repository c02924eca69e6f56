"""k-fold cross-validation: shard i holds out fold i (contiguous folds of a seeded permutation of n rows)."""
from __future__ import annotations

import numpy as np

from scellis_jupyter.catalog import Param, partitioner


@partitioner("kfold", summary="k shards, each holding out one of k disjoint folds of inputs['n'] rows", params={
    "k": Param(int, 5, lo=2, doc="number of folds"),
    "seed": Param(int, 0, lo=0, doc="seed of the row permutation"),
})
class KFold:
    def __init__(self, k=5, seed=0):
        self.k, self.seed = k, seed

    def __call__(self, inputs: dict) -> list:
        n = int(inputs["n"])
        perm = np.random.default_rng(self.seed).permutation(n)
        folds = np.array_split(perm, self.k)
        return [{"fold": i, "val": np.sort(f), "train": np.sort(np.concatenate(folds[:i] + folds[i + 1:]))}
                for i, f in enumerate(folds)]
