"""FedProx (Li et al. 2020): each site minimizes F_k(w) + mu/2 ||w - w^t||^2 with local SGD (the `fedsgd`
optimizer with `mu`, its anchor set to w^t); the server averages as FedAvg does (weighted by examples)."""
from __future__ import annotations

from scellis_jupyter.catalog import Param, aggregation
from scellis_jupyter.catalog.aggregations import Local, Strategy


@aggregation("fedprox", summary="FedProx: FedAvg whose sites add the proximal term mu/2 ||w - w_server||^2",
             params={"mu": Param(float, 0.01, lo=0.0, doc="proximal weight"),
                     "lr": Param(float, 0.05, lo=0.0, lo_open=True, doc="local SGD step size")})
class FedProx(Strategy):
    weighting = "examples"

    def __init__(self, mu=0.01, lr=0.05):
        self.mu, self.lr = mu, lr

    def local(self, state, memory, weights):
        return Local(optimizer={"name": "fedsgd", "lr": self.lr, "mu": self.mu}, slots={"anchor": weights})
