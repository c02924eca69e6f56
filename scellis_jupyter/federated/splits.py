"""Ways to deal one dataset's rows out to simulated sites: IID, and label skew (non-IID) by a Dirichlet
draw of each class's share per site (Hsu et al. 2019), the usual benchmark of client drift."""
from __future__ import annotations

import numpy as np

from ..errors import FederatedError


def iid_split(n: int, sites: int, seed: int = 0) -> list[np.ndarray]:
    """Row indices for `sites` sites: a random permutation cut into near-equal parts."""
    if sites < 1 or n < sites:
        raise FederatedError(f"cannot deal {n} rows to {sites} sites", where="iid_split",
                             hint="give at least one row per site")
    return [np.sort(p) for p in np.array_split(np.random.default_rng(seed).permutation(n), sites)]


def label_skew_split(y: np.ndarray, sites: int, alpha: float = 0.1, seed: int = 0) -> list[np.ndarray]:
    """Row indices per site: each class's rows split by proportions ~ Dirichlet(alpha) over the sites
    (alpha -> 0: each class lives on one site; alpha -> inf: IID). Every site gets at least one row."""
    y = np.asarray(y)
    rng = np.random.default_rng(seed)
    out: list[list[int]] = [[] for _ in range(sites)]
    for c in np.unique(y):
        rows = rng.permutation(np.flatnonzero(y == c))
        cuts = (np.cumsum(rng.dirichlet([alpha] * sites)) * len(rows)).astype(int)[:-1]
        for i, part in enumerate(np.split(rows, cuts)):
            out[i] += part.tolist()
    empty = [i for i, o in enumerate(out) if not o]
    if empty:
        raise FederatedError(f"label skew alpha={alpha} left site {empty[0]} with no rows", where="label_skew_split",
                             hint="raise alpha or use another seed")
    return [np.sort(np.asarray(o, dtype=np.int64)) for o in out]
