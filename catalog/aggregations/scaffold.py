"""SCAFFOLD (Karimireddy et al. 2020, alg. 1, option II).

Site i: y_i <- x; K steps y_i <- y_i - eta_l (g_i(y_i) - c_i + c); c_i+ = c_i - c + (x - y_i) / (K eta_l);
sends (dy_i, dc_i) = (y_i - x, c_i+ - c_i) and keeps c_i+. Server: x <- x + eta_g mean_S dy_i,
c <- c + (1/N) sum_S dc_i (N sites in all). c_i never leaves the site; c travels with x.
"""
from __future__ import annotations

import numpy as np

from scellis_jupyter.catalog import Param, aggregation
from scellis_jupyter.catalog.aggregations import Local, Strategy


@aggregation("scaffold", summary="SCAFFOLD: server and site control variates correct client drift (option II)",
             params={"lr": Param(float, 0.05, lo=0.0, lo_open=True, doc="local SGD step size eta_l"),
                     "server_lr": Param(float, 1.0, lo=0.0, lo_open=True, doc="global step size eta_g")})
class Scaffold(Strategy):
    weighting = "uniform"

    def __init__(self, lr=0.05, server_lr=1.0):
        self.lr, self.server_lr = lr, server_lr

    def init(self, weights, sites):
        return {"sites": int(sites), "c": {k: np.zeros_like(v, dtype=np.float64) for k, v in weights.items()}}

    def local(self, state, memory, weights):
        ci = memory.get("c", {})
        corr = {k: state["c"][k] - ci.get(k, 0.0) for k in weights}
        return Local(optimizer={"name": "fedsgd", "lr": self.lr, "scaffold": True}, slots={"correction": corr})

    def contribution(self, update, state, memory):
        c = state["c"]
        ci = memory.get("c") or {k: np.zeros_like(v) for k, v in c.items()}
        dy = update.delta
        k_eta = update.steps * update.lr
        ci_new = {k: ci[k] - c[k] - dy[k] / k_eta for k in dy}
        dc = {k: ci_new[k] - ci[k] for k in dy}
        return {"delta": dy, "dc": dc}, {**memory, "c": ci_new}

    def aggregate(self, weights, total, count, state):
        w = float(total["weight"])
        x = {k: weights[k] + self.server_lr * total["delta"][k] / w for k in weights}
        c = {k: state["c"][k] + total["dc"][k] / state["sites"] for k in weights}
        return x, {**state, "c": c}
