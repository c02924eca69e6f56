"""Nested dicts of arrays (what a strategy sends) as one flat float64 vector and back, and their sums.

Why flat: clipping (one norm over everything a site sends), Gaussian noise and secure aggregation's
fixed-point masks all act on one vector; the layout (names, shapes, in sorted order) is public and the same
on every site, so a sum of flat vectors unflattens to the sum of the trees.
"""
from __future__ import annotations

from typing import Any

import numpy as np


def layout(tree: Any, prefix: str = "") -> list[tuple[str, tuple]]:
    """[(path, shape)] of every array leaf, in sorted key order."""
    if isinstance(tree, dict):
        out = []
        for k in sorted(tree, key=str):
            out += layout(tree[k], f"{prefix}{k}/")
        return out
    return [(prefix.rstrip("/"), tuple(np.shape(tree)))]


def flatten(tree: Any) -> np.ndarray:
    if isinstance(tree, dict):
        parts = [flatten(tree[k]) for k in sorted(tree, key=str)]
        return np.concatenate(parts) if parts else np.zeros(0)
    return np.asarray(tree, np.float64).ravel()


def unflatten(vec: np.ndarray, lay: list[tuple[str, tuple]]) -> dict:
    out: dict = {}
    i = 0
    for path, shape in lay:
        n = int(np.prod(shape)) if shape else 1
        a = vec[i:i + n].reshape(shape)
        i += n
        node = out
        *parents, leaf = path.split("/")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = a if shape else np.float64(a)
    return out


def tree_map(fn, tree: Any) -> Any:
    if isinstance(tree, dict):
        return {k: tree_map(fn, v) for k, v in tree.items()}
    return fn(tree)


def tree_sum(*trees: Any) -> Any:
    """The element-wise sum of trees of one layout (run on a worker: the coordinator never sums)."""
    first = trees[0]
    if isinstance(first, dict):
        return {k: tree_sum(*(t[k] for t in trees)) for k in first}
    return sum((np.asarray(t, np.float64) for t in trees[1:]), np.asarray(first, np.float64))
