"""SGD for a federated site's local steps, with FedProx's proximal term and SCAFFOLD's drift correction.

Why one entry: both strategies change only the gradient a site's SGD step sees. FedProx (Li et al. 2020,
eq. 2) minimizes F_k(w) + mu/2 ||w - w^t||^2, whose gradient adds mu (w - w^t); SCAFFOLD (Karimireddy et
al. 2020, alg. 1 line 10) steps along g - c_i + c. The server model w^t ("anchor") and c - c_i
("correction") are state slots the federation fills at the start of each round; the step never changes them.
"""
from __future__ import annotations

from scellis_jupyter.catalog import Param, StateDecl, optimizer
from scellis_jupyter.graph import functional as F
from scellis_jupyter.graph.node import Node


@optimizer("fedsgd", summary="local SGD of a federated site: + mu (w - w_server) (FedProx), + c - c_i (SCAFFOLD)",
           params={
               "lr": Param(float, 1e-2, lo=0.0, doc="local step size"),
               "mu": Param(float, 0.0, lo=0.0, doc="FedProx proximal weight; 0 keeps no anchor"),
               "scaffold": Param(bool, False, doc="add SCAFFOLD's control-variate correction c - c_i"),
           })
class FedSGD:
    def __init__(self, lr=1e-2, mu=0.0, scaffold=False):
        self.lr, self.mu, self.scaffold = lr, mu, scaffold

    def state(self, shape: tuple, dtype: str) -> list[StateDecl]:
        c = "f64" if dtype == "f64" else "f32"
        return ([StateDecl("anchor", shape, c)] if self.mu else []) + \
               ([StateDecl("correction", shape, c)] if self.scaffold else [])

    def update(self, p: Node, g: Node, state: dict[str, Node], step: Node, lr: Node) -> tuple[Node, dict[str, Node]]:
        c = "f64" if p.dtype == "f64" else "f32"
        x, g, lr = F.cast(p, c), F.cast(g, c), F.cast(lr, c)
        if self.mu:
            g = F.add(g, F.mul(F.sub(x, state["anchor"]), self.mu))
        if self.scaffold:
            g = F.add(g, state["correction"])
        x = F.sub(x, F.mul(lr, g))
        return F.cast(x, p.dtype), {k: F.add(v, 0.0) for k, v in state.items()}
