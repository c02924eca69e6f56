"""Conformance of metric entries: batch-wise accumulation equals one pass, state round-trips, shapes are refused clearly."""
from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from ..catalog.registry import Entry, checker
from ..errors import ScellisError

_N, _C = 60, 4


_SPLITS = (7, 38)                     # three uneven batches: [0:7], [7:38], [38:60]


_RTOL, _ATOL = 1e-12, 1e-15


def _check_data(binary: bool) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1234)
    c = 2 if binary else _C
    t = np.concatenate([np.arange(c), rng.integers(0, c, _N - c)])     # every class present
    rng.shuffle(t)
    z = rng.standard_normal(_N) * 2.0 if binary else rng.standard_normal((_N, c)) * 2.0
    z = z + (2.0 * t - 1.0 if binary else 1.5 * np.eye(c)[t])           # better than chance
    return z, t


def _same(a: Any, b: Any) -> bool:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=_RTOL, atol=_ATOL, equal_nan=True))


def _fmt(x: Any) -> str:
    x = np.asarray(x)
    return repr(float(x)) if x.ndim == 0 else f"array{x.shape}"


@checker("metric")
def check_metric(entry: Entry) -> builtins.list[str]:
    """Interface; accumulation over 3 uneven batches == one batch; merge; state_dict round trip; reset."""
    try:
        m = entry.make()
    except Exception as e:
        return [f"instantiate: make() with default hyperparameters raised {type(e).__name__}: {e}"]
    missing = [k for k in ("reset", "update", "compute", "state_dict", "load_state_dict", "merge")
               if not callable(getattr(m, k, None))]
    if missing:
        return [f"interface: no {', '.join(missing)} method(s)"]
    failed = []
    if getattr(m, "needs", None) != "logits":
        failed.append(f"interface: needs must be 'logits', got {getattr(m, 'needs', None)!r}")
    if not isinstance(getattr(m, "higher_is_better", None), bool):
        failed.append("interface: higher_is_better must be True or False")
    if failed:
        return failed

    def run(batches, inst=None):
        inst = inst or entry.make()
        inst.reset()
        for zb, tb in batches:
            inst.update(zb, tb)
        return inst
    z = t = None
    for binary in (False, True):         # multi-class logits first; a binary-only metric refuses them
        zz, tt = _check_data(binary)
        try:
            whole = run([(zz, tt)]).compute()
        except ScellisError:
            continue
        z, t = zz, tt
        break
    if z is None:
        return ["inputs: refused both (N, C) and (N,) logits with all classes present"]
    a, b = _SPLITS
    parts = [(z[:a], t[:a]), (z[a:b], t[a:b]), (z[b:], t[b:])]
    r = np.asarray(whole, np.float64)
    if not np.all(np.isfinite(r)):
        failed.append(f"finite: compute() gave {_fmt(whole)} on random logits")
    acc = run(parts)
    r3 = acc.compute()
    if not _same(r3, whole):
        failed.append(f"accumulate: 3 uneven batches gave {_fmt(r3)}, one batch {_fmt(whole)} "
                      f"(update must add to the state, not replace it)")
    if not _same(acc.compute(), r3):
        failed.append("accumulate: compute() twice gave different results (compute must not change the state)")
    h1, h2 = run(parts[:2]), run(parts[2:])
    h1.merge(h2)
    rm = h1.compute()
    if not _same(rm, whole):
        failed.append(f"merge: merging two halves gave {_fmt(rm)}, the whole {_fmt(whole)}")
    half = run(parts[:2])
    d = half.state_dict()
    if not isinstance(d, dict) or not all(isinstance(k, str) and isinstance(v, np.ndarray) for k, v in d.items()):
        failed.append("state-dict: state_dict() must return dict[str, np.ndarray]")
    else:
        fresh = entry.make()
        fresh.load_state_dict({k: np.array(v, copy=True) for k, v in d.items()})
        fresh.update(*parts[2])
        rl = fresh.compute()
        if not _same(rl, whole):
            failed.append(f"state-dict: load_state_dict(state_dict()) and one more batch gave {_fmt(rl)}, "
                          f"expected {_fmt(whole)}")
    acc.reset()
    acc.update(*parts[1])
    rr, only = acc.compute(), run([parts[1]]).compute()
    if not _same(rr, only):
        failed.append(f"reset: after reset() one batch gave {_fmt(rr)}, a fresh metric {_fmt(only)}")
    return failed
