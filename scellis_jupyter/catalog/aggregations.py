"""The contract of aggregation entries (federated strategies): what a site trains with, what it sends, and
how the server folds the sum of what was sent into the next model.

Why a sum in the middle: a strategy splits into `contribution` (runs on the site, on its own update) and
`aggregate` (runs on the server, on the element-wise SUM of the contributions and their count). Every
strategy written this way works unchanged under secure aggregation (the server only ever learns a sum) and
under differential privacy (noise is added to that sum). State is explicit, JAX style: server state goes in
and out of `aggregate`, a site's own memory (SCAFFOLD's c_i, DiLoCo's inner AdamW moments) in and out of
`contribution`, and never leaves the site.

Entries are ordinary files (`catalog/aggregations/*.py`) subclassing `Strategy`; a user's strategy is the
same thing registered with `@aggregation(name, ...)` and runs on the same path.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["Strategy", "Update", "Local"]

Arrays = dict[str, np.ndarray]


@dataclass
class Update:
    """What one site's local training produced (float64 on the site; never sent as is)."""

    site: str
    start: Arrays              # the server model the site started from
    end: Arrays                # its weights after the local steps
    n: int                     # local examples
    steps: int                 # local optimizer steps taken
    lr: float                  # the local optimizer's step size
    version: int               # the server model version it started from
    loss: float = float("nan")
    opt_state: dict = field(default_factory=dict)   # the local optimizer's state after the steps

    @property
    def delta(self) -> Arrays:
        """end - start, per parameter."""
        return {k: self.end[k] - self.start[k] for k in self.start}


@dataclass
class Local:
    """How a site trains this round: `optimizer` (a recipe optimizer table; None keeps the spec's), initial
    values of optimizer state slots {slot: {param: array}}, and the optimizer step to continue from."""

    optimizer: dict | None = None
    slots: dict = field(default_factory=dict)
    step_offset: int = 0


class Strategy:
    """Base of aggregation entries. Override what differs; the defaults are FedAvg's parts.

    - `init(weights, sites)` -> server state (a dict of arrays and numbers).
    - `local(state, memory, weights)` -> `Local`: how a site trains this round (runs on the site).
    - `contribution(update, state, memory)` -> ({name: array or {param: array}}, new memory): the vectors
      the site sends, unweighted. The federation scales them by the site's weight w (its example count
      when `weighting = "examples"`, 1 when "uniform"; always 1 under differential privacy, so one site's
      influence is bounded by the clip norm alone) and adds "weight": w before summing.
    - `aggregate(weights, total, count, state)` -> (new weights, new state): `total` is the element-wise
      sum of the weighted contributions of the `count` sites that reported, with total["weight"] = sum w.
    - `asynchronous`: True for buffered asynchronous strategies (FedBuff): the server applies `aggregate`
      every `buffer` arrivals, each contribution's weight multiplied by `staleness_weight(tau)` first.
    """

    asynchronous = False
    buffer = 0
    weighting = "examples"

    def init(self, weights: Arrays, sites: int) -> dict:
        return {"sites": int(sites)}

    def local(self, state: dict, memory: dict, weights: Arrays) -> Local:
        return Local()

    def contribution(self, update: Update, state: dict, memory: dict) -> tuple[dict, dict]:
        return {"delta": update.delta}, memory

    def aggregate(self, weights: Arrays, total: dict, count: int, state: dict) -> tuple[Arrays, dict]:
        w = float(total["weight"])
        return {k: weights[k] + total["delta"][k] / w for k in weights}, state

    def staleness_weight(self, tau: int) -> float:
        return 1.0
