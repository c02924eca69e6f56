"""DiLoCo (Douillard et al. 2023, alg. 1): H inner AdamW steps per site, then an outer Nesterov-momentum SGD
step on the averaged pseudo-gradient.

Site i: theta_i <- theta; H AdamW steps (its moments and step count kept on the site across rounds);
sends delta_i = theta - theta_i. Server: Delta = mean_i delta_i; with torch.optim.SGD(nesterov=True)'s
semantics b <- Delta on the first outer step, else b <- mu b + Delta; theta <- theta - lr_out (Delta + mu b).
"""
from __future__ import annotations

from scellis_jupyter.catalog import Param, aggregation
from scellis_jupyter.catalog.aggregations import Local, Strategy


@aggregation("diloco", summary="DiLoCo: H inner AdamW steps per site, outer Nesterov SGD on the pseudo-gradient",
             params={"inner_lr": Param(float, 1e-3, lo=0.0, lo_open=True, doc="inner AdamW step size"),
                     "weight_decay": Param(float, 0.0, lo=0.0, doc="inner AdamW decoupled weight decay"),
                     "outer_lr": Param(float, 0.7, lo=0.0, lo_open=True, doc="outer SGD step size"),
                     "momentum": Param(float, 0.9, lo=0.0, hi=1.0, hi_open=True, doc="outer Nesterov momentum")})
class DiLoCo(Strategy):
    weighting = "uniform"

    def __init__(self, inner_lr=1e-3, weight_decay=0.0, outer_lr=0.7, momentum=0.9):
        self.inner_lr, self.weight_decay = inner_lr, weight_decay
        self.outer_lr, self.momentum = outer_lr, momentum

    def init(self, weights, sites):
        return {"sites": int(sites), "outer_steps": 0, "buf": None}

    def local(self, state, memory, weights):
        return Local(optimizer={"name": "adamw", "lr": self.inner_lr, "weight_decay": self.weight_decay},
                     slots=memory.get("adam", {}), step_offset=int(memory.get("t", 0)))

    def contribution(self, update, state, memory):
        slots = {}
        for p, st in update.opt_state.items():
            for slot, a in st.items():
                slots.setdefault(slot, {})[p] = a
        mem = {**memory, "adam": slots, "t": int(memory.get("t", 0)) + update.steps}
        return {"pseudo": {k: -d for k, d in update.delta.items()}}, mem

    def aggregate(self, weights, total, count, state):
        w, mu = float(total["weight"]), self.momentum
        g = {k: total["pseudo"][k] / w for k in weights}
        buf = g if state["buf"] is None else {k: mu * state["buf"][k] + g[k] for k in weights}
        new = {k: weights[k] - self.outer_lr * (g[k] + mu * buf[k]) for k in weights}
        return new, {**state, "buf": buf, "outer_steps": state["outer_steps"] + 1}
