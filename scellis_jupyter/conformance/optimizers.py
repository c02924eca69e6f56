"""Conformance of optimizer entries (and `apply_update`, one update on numpy values for tests and pokes)."""
from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from .. import dtypes as dt
from ..catalog.registry import Entry, _bad_decls, checker, initial_state
from ..executor.executor import realize
from ..graph import functional as F
from ..graph.node import Node
from ..tensor import tensor


def apply_update(opt: Any, p: np.ndarray, g: np.ndarray, state: dict, step: int | float, lr: float,
                 device=None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Run one `opt.update` on numpy values and return numpy results (tests, notebook pokes).

    step and lr become 0-d f32 nodes as in training; for f64 parameters (reference device only) they are
    f64 so float64 comparisons with PyTorch are not limited by the rounding of lr to f32.
    """
    dev = _device(device)
    p = np.asarray(p)
    pd = dt.canon(p.dtype)
    decl = {d.name: d for d in opt.state(tuple(p.shape), pd)}
    sdt = "f64" if pd == "f64" else "f32"
    pn = tensor(p, dtype=pd, device=dev).node
    gn = tensor(np.asarray(g), dtype=pd, device=dev).node
    sn = {k: tensor(np.asarray(v), dtype=decl[k].dtype if k in decl else dt.canon(np.asarray(v).dtype),
                    device=dev).node for k, v in state.items()}
    new_p, new_s = opt.update(pn, gn, sn, F.scalar(float(step), sdt), F.scalar(float(lr), sdt))
    names = builtins.list(new_s)
    outs = realize([new_p] + [new_s[k] for k in names], dev.impl)
    return outs[0].numpy().copy(), {k: s.numpy().copy() for k, s in zip(names, outs[1:])}


from .common import _device

_CHECK_SHAPES = ((), (7,), (5, 3), (2, 3, 4))


@checker("optimizer")
def check_optimizer(entry: Entry) -> builtins.list[str]:
    """Interface, declarations, and two update steps per shape on the reference device (f32)."""
    try:
        opt = entry.make()
    except Exception as e:
        return [f"instantiate: make() with default hyperparameters raised {type(e).__name__}: {e}"]
    missing = [m for m in ("state", "update") if not callable(getattr(opt, m, None))]
    if missing:
        return [f"interface: no {' or '.join(missing)}() method"]
    failed: builtins.list[str] = []
    rng = np.random.default_rng(0)
    lr = getattr(opt, "lr", None)
    lr = float(lr) if isinstance(lr, (int, float)) and not isinstance(lr, bool) else 1e-3
    for shape in _CHECK_SHAPES:
        at = f" (param shape {shape})"
        try:
            decls = opt.state(shape, "f32")
        except Exception as e:
            failed.append(f"state-declarations: state{shape, 'f32'} raised {type(e).__name__}: {e}")
            continue
        bad = _bad_decls(decls)
        if bad:
            failed.append(f"state-declarations: {bad}{at}")
            continue
        byname = {d.name: d for d in decls}
        try:
            st = initial_state(opt, shape, "f32")
            if hasattr(opt, "init_state"):
                extra = set(opt.init_state(shape, "f32")) - set(byname)
                if extra:
                    raise ValueError(f"init_state returns undeclared state {sorted(extra)}")
        except Exception as e:
            failed.append(f"init-state: {type(e).__name__}: {e}{at}")
            continue
        p = rng.standard_normal(shape).astype(np.float32)
        for step in (1, 2):
            g = rng.standard_normal(shape).astype(np.float32)
            try:
                ref = _device("reference")
                pn = tensor(p, dtype="f32", device=ref).node
                gn = tensor(g, dtype="f32", device=ref).node
                sn = {k: tensor(v, dtype=byname[k].dtype, device=ref).node for k, v in st.items()}
                res = opt.update(pn, gn, sn, F.scalar(float(step)), F.scalar(lr))
            except Exception as e:
                failed.append(f"update-runs: update() raised {type(e).__name__}: {e}{at}")
                break
            if not (isinstance(res, tuple) and len(res) == 2 and isinstance(res[0], Node)
                    and isinstance(res[1], dict) and all(isinstance(v, Node) for v in res[1].values())):
                failed.append(f"update-returns: update() must return (Node, dict[str, Node]), got "
                              f"{type(res).__name__}{at}")
                break
            new_p, new_s = res
            if tuple(new_p.shape) != tuple(shape) or new_p.dtype != "f32":
                failed.append(f"update-shapes: new parameter is {tuple(new_p.shape)}:{new_p.dtype}, "
                              f"expected {shape}:f32{at}")
                break
            if set(new_s) != set(byname):
                failed.append(f"state-keys: update() returns state {sorted(new_s)}, declared {sorted(byname)}{at}")
                break
            wrong = [f"{k!r} is {tuple(v.shape)}:{v.dtype}, declared {byname[k].shape}:{byname[k].dtype}"
                     for k, v in new_s.items() if (tuple(v.shape), v.dtype) != (byname[k].shape, byname[k].dtype)]
            if wrong:
                failed.append(f"state-shapes: {'; '.join(wrong)}{at}")
                break
            try:
                p2, s2 = apply_update(opt, p, g, st, step, lr)
            except Exception as e:
                failed.append(f"update-runs: evaluating the update raised {type(e).__name__}: {e}{at}")
                break
            nonfinite = [k for k, v in [("param", p2)] + sorted(s2.items())
                         if np.asarray(v).dtype.kind == "f" and not np.all(np.isfinite(v))]
            if nonfinite:
                failed.append(f"finite: non-finite values in {', '.join(nonfinite)} after step {step}{at}")
                break
            if shape == (5, 3) and step == 1:
                p3, s3 = apply_update(opt, p, g, st, step, lr)
                if not (np.array_equal(p2, p3) and all(np.array_equal(s2[k], s3[k]) for k in s2)):
                    failed.append("pure: the same update on the same inputs gave different results "
                                  "(update must not keep Python-side state; pass it in `state`)")
            p, st = p2, s2
    return failed
