"""FedBuff (Nguyen et al. 2022, alg. 1): asynchronous buffered aggregation.

Sites train on whatever model version they were last sent and report when done; the server adds each
arrival s(tau) Delta_i to a buffer, tau = (server version now) - (version the site started from), with
s(tau) = 1 / sqrt(1 + tau); after K arrivals w <- w + eta_g (buffer / K), the version advances and the
buffer empties. A site is sent the current model as soon as it reports.
"""
from __future__ import annotations

import math

from scellis_jupyter.catalog import Param, aggregation
from scellis_jupyter.catalog.aggregations import Strategy


@aggregation("fedbuff", summary="FedBuff: asynchronous buffer of K site updates with staleness weights 1/sqrt(1+tau)",
             params={"buffer": Param(int, 2, lo=1, doc="K, arrivals per server update"),
                     "server_lr": Param(float, 1.0, lo=0.0, lo_open=True, doc="eta_g")})
class FedBuff(Strategy):
    asynchronous = True
    weighting = "uniform"

    def __init__(self, buffer=2, server_lr=1.0):
        self.buffer, self.server_lr = buffer, server_lr

    def staleness_weight(self, tau):
        return 1.0 / math.sqrt(1.0 + tau)

    def aggregate(self, weights, total, count, state):
        return {k: weights[k] + self.server_lr * total["delta"][k] / count for k in weights}, state
