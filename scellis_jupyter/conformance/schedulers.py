"""Conformance of scheduler entries: values are finite and pure in the step, state round-trips."""
from __future__ import annotations

import builtins
import json
import math
from typing import Any

from ..catalog.registry import CatalogError, Entry, checker
from ..catalog.schedulers import _is_stateful

_BASE, _TOTAL, _STEPS = 0.1, 100, 201


_METRIC = [1.0 / (1 + i) if i < 8 else 0.11 + 0.001 * ((i * 7) % 3) for i in range(30)] + [0.05, 0.04, 0.04]


def _same(a: builtins.list, b: builtins.list) -> bool:
    """Equal value for value, a NaN equal to a NaN (the finite check reports NaNs, not this one)."""
    return len(a) == len(b) and all(x == y or (x != x and y != y) for x, y in zip(a, b))


def _values(obj: Any, steps: range, total: int | None = _TOTAL) -> builtins.list[float]:
    return [obj.lr(t, _BASE, total) for t in steps]


@checker("scheduler")
def check_scheduler(entry: Entry) -> builtins.list[str]:
    """Defaults instantiate; lr finite, >= 0, deterministic for steps 0..200; state round-trips via JSON."""
    try:
        obj = entry.make()
    except Exception as e:
        return [f"instantiate: make() with default hyperparameters raised {type(e).__name__}: {e}"]
    if not callable(getattr(obj, "lr", None)):
        return ["interface: no lr(step, base_lr, total_steps) method"]
    stateful = _is_stateful(obj)
    if stateful and not all(callable(getattr(obj, m, None)) for m in ("state_dict", "load_state_dict")):
        return ["interface: an entry with observe() must define state_dict() and load_state_dict()"]
    failed: builtins.list[str] = []
    try:
        vals = _values(obj, range(_STEPS))
    except Exception as e:
        return [f"lr-runs: lr(step, {_BASE}, {_TOTAL}) raised {type(e).__name__}: {e}"]
    bad = [(t, v) for t, v in enumerate(vals)
           if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0]
    if bad:
        t, v = bad[0]
        failed.append(f"finite: lr({t}) = {v!r} is not a finite number >= 0 (base_lr {_BASE}, total_steps {_TOTAL})")
    try:
        again = _values(obj, range(_STEPS))
        fresh = _values(entry.make(), range(_STEPS))
    except Exception as e:
        return failed + [f"deterministic: recomputing raised {type(e).__name__}: {e}"]
    if not (_same(again, vals) and _same(fresh, vals)):
        failed.append("deterministic: the same (step, base_lr, total_steps) gave different values "
                      "(lr must be a pure function of its arguments and of state set by observe)")
    try:
        obj.lr(0, _BASE, None)
    except CatalogError:
        pass
    except Exception as e:
        failed.append(f"total-steps-none: lr(0, {_BASE}, None) raised {type(e).__name__}: {e} "
                      "(raise a CatalogError saying total_steps is needed)")
    if callable(getattr(obj, "state_dict", None)):
        failed += _check_state(entry, stateful)
    return failed


def _check_state(entry: Entry, stateful: bool) -> builtins.list[str]:
    """Observe half the metric sequence, save through JSON, restore in a fresh instance, compare the rest."""
    a = entry.make()
    half = len(_METRIC) // 2
    try:
        for i, m in enumerate(_METRIC[:half]):
            if stateful:
                a.observe(m, 3 * i)
        text = json.dumps(a.state_dict(), allow_nan=False)
    except Exception as e:
        return [f"state-json: observe/state_dict raised or gave non-JSON state: {type(e).__name__}: {e}"]
    b = entry.make()
    try:
        b.load_state_dict(json.loads(text))
    except Exception as e:
        return [f"state-roundtrip: load_state_dict raised {type(e).__name__}: {e}"]
    out = []
    try:
        for i, m in enumerate(_METRIC[half:], start=half):
            if stateful:
                a.observe(m, 3 * i)
                b.observe(m, 3 * i)
        va, vb = _values(a, range(_STEPS)), _values(b, range(_STEPS))
    except Exception as e:
        return [f"observe: observe() or lr() after observing raised {type(e).__name__}: {e}"]
    if not _same(va, vb):
        t = next(i for i, (x, y) in enumerate(zip(va, vb)) if not _same([x], [y]))
        out.append(f"state-roundtrip: after load_state_dict, lr({t}) is {vb[t]!r} instead of {va[t]!r}")
    bad = [(t, v) for t, v in enumerate(va) if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0]
    if bad:
        out.append(f"observe: after observing metrics lr({bad[0][0]}) = {bad[0][1]!r} is not finite and >= 0")
    return out
