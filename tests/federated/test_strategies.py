"""Each built-in strategy against its paper's update equations, reimplemented here in numpy float64.

The model is one linear layer under MSE, trained full-batch (batch_size="full"), so each site's local steps
are plain gradient steps this file can redo exactly; the engine trains in f32, so results agree within
float32 rounding (rtol 2e-4, atol 2e-5 after a handful of steps).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from scellis_jupyter import catalog
from scellis_jupyter.federated import Federation
from scellis_jupyter.pool import Pool

from fixtures import spec_text

SPEC = spec_text("fed_linear", nodes=[{"name": "out", "op": "linear", "out": 3}])
RTOL, ATOL = 2e-4, 2e-5
SIZES = (6, 10, 16)


def site_data(seed=1):
    rng = np.random.default_rng(seed)
    true = rng.standard_normal((3, 4))
    out = {}
    for i, n in enumerate(SIZES):
        x = rng.standard_normal((n, 4)) + i           # each site shifted: the sites disagree
        y = x @ true.T + 0.1 * rng.standard_normal((n, 3)) + i
        out[f"s{i}"] = (x.astype(np.float32), y.astype(np.float32))
    return out


DATA = site_data()


@pytest.fixture(scope="module")
def pool():
    with Pool() as p:
        yield p


def grad(w, x, y):
    """d/dW, d/db of mean((x W^T + b - y)^2) over all B*out elements (float64)."""
    x, y = x.astype(np.float64), y.astype(np.float64)
    r = 2.0 * (x @ w["out.weight"].T + w["out.bias"] - y) / y.size
    return {"out.weight": r.T @ x, "out.bias": r.sum(0)}


def sgd(w, x, y, steps, lr, extra=lambda w: {k: 0.0 for k in w}):
    w = {k: v.copy() for k, v in w.items()}
    for _ in range(steps):
        g, e = grad(w, x, y), extra(w)
        w = {k: w[k] - lr * (g[k] + e[k]) for k in w}
    return w


def close(a, b):
    for k in b:
        np.testing.assert_allclose(a[k], b[k], rtol=RTOL, atol=ATOL, err_msg=k)


def fed(pool, strategy, **kw):
    return Federation(pool, SPEC, dict(DATA), strategy=strategy, batch_size="full", **kw)


def test_fedavg_is_the_example_weighted_mean_of_local_sgd(pool):
    f = fed(pool, "fedavg", local_steps=3)
    w0 = dict(f.weights)
    f.fit(1)
    locals_ = [sgd(w0, *DATA[s], 3, 0.05) for s in DATA]
    n = np.array(SIZES, np.float64)
    ref = {k: sum(ni * wl[k] for ni, wl in zip(n, locals_)) / n.sum() for k in w0}
    close(f.weights, ref)
    assert f.version == 1


def test_fedprox_adds_the_proximal_gradient(pool):
    mu, lr = 0.5, 0.05
    f = fed(pool, "fedprox", params={"mu": mu, "lr": lr}, local_steps=4)
    w0 = dict(f.weights)
    f.fit(1)
    locals_ = [sgd(w0, *DATA[s], 4, lr, extra=lambda w: {k: mu * (w[k] - w0[k]) for k in w}) for s in DATA]
    n = np.array(SIZES, np.float64)
    ref = {k: sum(ni * wl[k] for ni, wl in zip(n, locals_)) / n.sum() for k in w0}
    close(f.weights, ref)
    plain = {k: sum(ni * wl[k] for ni, wl in zip(n, [sgd(w0, *DATA[s], 4, lr) for s in DATA])) / n.sum() for k in w0}
    assert max(np.abs(ref[k] - plain[k]).max() for k in w0) > 100 * ATOL     # mu really changed the result


def test_scaffold_control_variates_option_ii_over_two_rounds(pool):
    lr, glr, K = 0.05, 0.8, 3
    f = fed(pool, "scaffold", params={"lr": lr, "server_lr": glr}, local_steps=K)
    x = dict(f.weights)
    c = {k: np.zeros_like(v) for k, v in x.items()}
    ci = {s: {k: np.zeros_like(v) for k, v in x.items()} for s in DATA}
    for _ in range(2):
        f.fit(1)
        dys, dcs = [], []
        for s in DATA:
            y = sgd(x, *DATA[s], K, lr, extra=lambda w, s=s: {k: c[k] - ci[s][k] for k in w})
            ci_new = {k: ci[s][k] - c[k] + (x[k] - y[k]) / (K * lr) for k in x}
            dys.append({k: y[k] - x[k] for k in x})
            dcs.append({k: ci_new[k] - ci[s][k] for k in x})
            ci[s] = ci_new
        x = {k: x[k] + glr * sum(d[k] for d in dys) / len(DATA) for k in x}
        c = {k: c[k] + sum(d[k] for d in dcs) / len(DATA) for k in x}
        close(f.weights, x)
        close(f.state["c"], c)


def adamw(w, state, x, y, steps, lr, wd, b1=0.9, b2=0.999, eps=1e-8):
    """torch.optim.AdamW (decoupled decay, bias-corrected step), continuing from `state` (m, v, t)."""
    w = {k: v.copy() for k, v in w.items()}
    m, v, t = dict(state["m"]), dict(state["v"]), state["t"]
    for _ in range(steps):
        t += 1
        g = grad(w, x, y)
        for k in w:
            w[k] = w[k] * (1 - lr * wd)
            m[k] = b1 * m[k] + (1 - b1) * g[k]
            v[k] = b2 * v[k] + (1 - b2) * g[k] ** 2
            denom = np.sqrt(v[k]) / math.sqrt(1 - b2 ** t) + eps
            w[k] = w[k] - (lr / (1 - b1 ** t)) * m[k] / denom
    return w, {"m": m, "v": v, "t": t}


def test_diloco_inner_adamw_outer_nesterov(pool):
    H, ilr, wd, olr, mom = 4, 0.02, 0.01, 0.7, 0.9
    f = fed(pool, "diloco", params={"inner_lr": ilr, "weight_decay": wd, "outer_lr": olr, "momentum": mom},
            local_steps=H)
    th = dict(f.weights)
    inner = {s: {"m": {k: 0.0 for k in th}, "v": {k: 0.0 for k in th}, "t": 0} for s in DATA}
    buf = None
    for _ in range(2):
        f.fit(1)
        deltas = []
        for s in DATA:
            wl, inner[s] = adamw(th, inner[s], *DATA[s], H, ilr, wd)
            deltas.append({k: th[k] - wl[k] for k in th})
        g = {k: sum(d[k] for d in deltas) / len(DATA) for k in th}
        buf = g if buf is None else {k: mom * buf[k] + g[k] for k in th}
        th = {k: th[k] - olr * (g[k] + mom * buf[k]) for k in th}
        close(f.weights, th)


def test_fedbuff_staleness_weighted_buffer(pool):
    K, glr, steps, lr = 2, 0.9, 2, 0.05
    f = fed(pool, "fedbuff", params={"buffer": K, "server_lr": glr}, local_steps=steps)
    history = {0: dict(f.weights)}
    results = f.fit(3)
    assert len(results) == 3 and f.version == 3
    w = dict(history[0])
    for i, r in enumerate(results):
        assert len(r.staleness) == K
        total = {k: 0.0 for k in w}
        for site, version, tau in r.staleness:
            assert tau == i - version                # tau = server version at arrival - version trained on
            start = history[version]
            d = {k: v - start[k] for k, v in sgd(start, *DATA[site], steps, lr).items()}
            total = {k: total[k] + d[k] / math.sqrt(1 + tau) for k in w}
        w = {k: w[k] + glr * total[k] / K for k in w}
        history[i + 1] = w
    close(f.weights, w)
    assert any(tau > 0 for r in results for _, _, tau in r.staleness), "no stale arrival: the test proves little"


def test_a_user_strategy_runs_the_same_path(pool, clean_registry):
    catalog.load_source('''
import numpy as np
from scellis_jupyter.catalog import Param, aggregation
from scellis_jupyter.catalog.aggregations import Strategy

@aggregation("median_delta", params={"scale": Param(float, 1.0, lo=0.0)})
class MedianOfSites(Strategy):
    """A user's strategy: every site counts once; the server steps by scale * the mean delta."""
    weighting = "uniform"
    def __init__(self, scale=1.0):
        self.scale = scale
    def aggregate(self, weights, total, count, state):
        return {k: weights[k] + self.scale * total["delta"][k] / count for k in weights}, state
''', "user_strategy")
    f = fed(pool, "median_delta", params={"scale": 0.5}, local_steps=2)
    w0 = dict(f.weights)
    f.fit(1)
    locals_ = [sgd(w0, *DATA[s], 2, 0.05) for s in DATA]
    close(f.weights, {k: w0[k] + 0.5 * sum(wl[k] - w0[k] for wl in locals_) / 3 for k in w0})
    assert catalog.get("aggregation", "median_delta").origin == "<cell:user_strategy>"


def test_builtin_strategies_are_catalog_content():
    names = {e["name"] for e in catalog.list("aggregation")}
    assert {"fedavg", "fedprox", "scaffold", "diloco", "fedbuff"} <= names
    assert catalog.get("aggregation", "fedprox").origin.endswith("catalog/aggregations/fedprox.py")
    with pytest.raises(catalog.CatalogError, match="out of range"):
        catalog.make("aggregation", "fedprox", mu=-1.0)
