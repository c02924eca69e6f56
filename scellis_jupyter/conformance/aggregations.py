"""Conformance of aggregation entries (federated strategies): the interface, and one round on a toy model
in which every site's update is known, so the aggregate must keep the model's names, shapes and finiteness,
and a round of identical sites at zero delta must leave the model where it was."""
from __future__ import annotations

import builtins

import numpy as np

from ..catalog.aggregations import Local, Update
from ..catalog.registry import Entry, checker

_METHODS = ("init", "local", "contribution", "aggregate")


def _tree_sum(trees: builtins.list, weights: builtins.list) -> dict:
    first = trees[0]
    if isinstance(first, dict):
        return {k: _tree_sum([t[k] for t in trees], weights) for k in first}
    return sum(w * np.asarray(t, np.float64) for w, t in zip(weights, trees))


def _round(obj, w: dict, ends: builtins.list, sites: int = 3) -> tuple[dict, dict]:
    state = obj.init(w, sites)
    outs = []
    for i, end in enumerate(ends):
        local = obj.local(state, {}, w)
        if not isinstance(local, Local):
            raise TypeError(f"local() returned {type(local).__name__}, not Local")
        up = Update(f"s{i}", dict(w), end, 10 + i, 3, 0.1, 0, 1.0,
                    {k: {"m": np.zeros_like(v), "v": np.zeros_like(v)} for k, v in w.items()})
        vec, _ = obj.contribution(up, state, {})
        outs.append(vec)
    wts = [1.0] * len(outs)
    total = _tree_sum(outs, wts)
    total["weight"] = np.float64(sum(wts))
    return obj.aggregate(w, total, len(outs), state)


@checker("aggregation")
def check_aggregation(entry: Entry) -> builtins.list[str]:
    """Defaults instantiate; one toy round keeps names, shapes and finiteness; zero updates change nothing."""
    try:
        obj = entry.make()
    except Exception as e:
        return [f"instantiate: make() with default hyperparameters raised {type(e).__name__}: {e}"]
    missing = [m for m in _METHODS if not callable(getattr(obj, m, None))]
    if missing:
        return [f"interface: no {', '.join(m + '()' for m in missing)} method"]
    if getattr(obj, "weighting", "examples") not in ("examples", "uniform"):
        return [f"weighting: {obj.weighting!r} is not 'examples' or 'uniform'"]
    rng = np.random.default_rng(0)
    w = {"a.weight": rng.standard_normal((3, 2)), "a.bias": rng.standard_normal(3)}
    failed = []
    try:
        new, _ = _round(obj, w, [{k: v + 0.1 * rng.standard_normal(v.shape) for k, v in w.items()} for _ in range(3)])
        if set(new) != set(w) or any(np.shape(new[k]) != w[k].shape for k in w):
            failed.append(f"aggregate-shapes: the new model has {sorted((k, np.shape(v)) for k, v in new.items())}")
        elif not all(np.all(np.isfinite(new[k])) for k in w):
            failed.append("finite: the new model has non-finite values")
        same, _ = _round(obj, w, [dict(w) for _ in range(3)])
        if not all(np.allclose(same[k], w[k], rtol=0, atol=1e-12) for k in w):
            failed.append("fixed-point: sites that did not move the model moved it")
    except Exception as e:
        failed.append(f"round-runs: a toy round raised {type(e).__name__}: {e}")
    return failed
