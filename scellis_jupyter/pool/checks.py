"""How a shard's result is judged before it may enter a reduction: agreement within a tolerance, and
Freivalds' check of a matrix product.

Why ours: Dask moves and schedules; whether a peer told the truth is the pool's question. Randomness that a
peer must not predict (which shards are spot-checked, Freivalds' vectors) comes from `secrets`, a CSPRNG.
"""
from __future__ import annotations

import math
import secrets
from typing import Any

import numpy as np


def agree(a: Any, b: Any, tol: float) -> bool:
    """Whether two results match: same structure, arrays of one shape within `tol` (relative and absolute)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(agree(a[k], b[k], tol) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(agree(x, y, tol) for x, y in zip(a, b))
    if isinstance(a, (str, bytes, type(None), bool)) or isinstance(b, (str, bytes, type(None), bool)):
        return a == b
    try:
        x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    except (TypeError, ValueError):
        return a == b
    if x.shape != y.shape:
        return False
    if not (np.all(np.isfinite(x) == np.isfinite(y)) and np.array_equal(x[~np.isfinite(x)], y[~np.isfinite(y)])):
        return False
    f = np.isfinite(x)
    return bool(np.all(np.abs(x[f] - y[f]) <= tol * (1.0 + np.abs(y[f]))))


def spot_pick(fraction: float) -> bool:
    """True for a `fraction` of calls, drawn from the CSPRNG (resolution 2^-53)."""
    return secrets.randbits(53) < int(fraction * (1 << 53))


def freivalds(a: np.ndarray, b: np.ndarray, c: Any, rounds: int = 20, tol: float = 1e-9) -> bool:
    """Whether C == A @ B, checked as A (B r) == C r for `rounds` random 0/1 vectors r: O(n^2) per round.

    For a wrong C (exact arithmetic) each round accepts with probability <= 1/2, so the false-accept
    probability is <= 2^-rounds. Floating point: entries are compared within `tol` relative to |A||B r|.
    """
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    try:
        c = np.asarray(c, np.float64)
    except (TypeError, ValueError):
        return False
    if c.shape != (a.shape[0], b.shape[1]) or not np.all(np.isfinite(c)):
        return False
    m = b.shape[1]
    bits = np.unpackbits(np.frombuffer(secrets.token_bytes((m * rounds + 7) // 8), np.uint8))[:m * rounds]
    r = bits.reshape(m, rounds).astype(np.float64)          # one independent 0/1 vector per round (column)
    br = b @ r
    lhs, rhs = a @ br, c @ r
    scale = np.abs(a) @ np.abs(br) + 1.0
    return bool(np.all(np.abs(lhs - rhs) <= tol * scale))


def false_accept_bound(rounds: int) -> float:
    """The stated false-accept probability of Freivalds' check with `rounds` rounds: 2^-rounds."""
    return math.ldexp(1.0, -rounds)
