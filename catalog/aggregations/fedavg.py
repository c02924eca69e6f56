"""FedAvg (McMahan et al. 2017, alg. 1): w_{t+1} = sum_k n_k/n w^k_{t+1} = w_t + sum_k n_k (w^k - w_t) / sum_k n_k.

Sites train with the spec's own optimizer; the server averages their deltas weighted by examples.
"""
from __future__ import annotations

from scellis_jupyter.catalog import aggregation
from scellis_jupyter.catalog.aggregations import Strategy


@aggregation("fedavg", summary="FedAvg: average of the sites' models weighted by their example counts")
class FedAvg(Strategy):
    weighting = "examples"
