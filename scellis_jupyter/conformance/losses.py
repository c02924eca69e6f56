"""Conformance of loss entries: declared targets and reductions, finite values and gradients, on a device."""
from __future__ import annotations

import builtins

import numpy as np

from ..catalog.losses import REDUCTIONS, Target, loss_value, target_of
from ..catalog.registry import Entry, checker
from ..errors import ScellisError
from ..executor.executor import realize
from ..graph.autodiff import grad
from ..tensor import tensor
from .common import _device

_CHECK_OUTPUTS = ((6,), (2, 5), (3, 4), (4, 3, 5), (2,), ())


_B = 5


def _run(nodes, device="reference"):
    return [np.array(s.numpy()) for s in realize(list(nodes), _device(device).impl)]


def _const(a, dtype, device="reference"):
    return tensor(np.asarray(a), dtype=dtype, device=_device(device)).node


INPUTS = ("real", "prob", "logprob", "positive")    # what a loss's `inputs` attribute may say the output holds


def _pred(rng, shape, target: Target, inputs: str):
    """Random predictions of the kind the loss reads: logits, probabilities, log-probabilities, rates."""
    p = rng.standard_normal(shape)
    if target.kind == "class" and shape:       # logits a bit better than chance, as in training
        p = p * 1.5
    if inputs == "prob":
        return 0.02 + 0.96 / (1.0 + np.exp(-p))
    if inputs == "logprob":
        z = p - p.max(axis=-1, keepdims=True) if shape else p * 0.0
        return z - np.log(np.exp(z).sum(axis=-1, keepdims=True)) if shape else z
    if inputs == "positive":
        return np.exp(p)
    return p


@checker("loss")
def check_loss(entry: Entry) -> builtins.list[str]:
    """Interface; declared target; a finite scalar and finite gradient for every output shape the loss
    accepts; f64 computed in f64 and f16 reduced in f32; reduction behaviour; the target is read; pure."""
    try:
        loss = entry.make()
    except Exception as e:
        return [f"instantiate: make() with default hyperparameters raised {type(e).__name__}: {e}"]
    if not callable(loss) or not callable(getattr(loss, "target", None)):
        return ["interface: a loss instance must be callable as loss(pred, y) and have target(out_shape)"]
    red = getattr(loss, "reduction", None)
    rp = entry.params.get("reduction")
    allowed = tuple(rp.choices) if rp is not None and rp.choices else REDUCTIONS
    if not isinstance(red, str) or red not in allowed:
        return [f"interface: reduction must be one of {allowed}, got {red!r}"]
    inputs = getattr(loss, "inputs", "real")
    if inputs not in INPUTS:
        return [f"interface: inputs must be one of {INPUTS}, got {inputs!r}"]
    failed: builtins.list[str] = []
    accepted = []
    shapes = tuple(getattr(loss, "example_outputs", ())) + _CHECK_OUTPUTS
    for out in shapes:
        try:
            t = target_of(loss, tuple(out))
        except ScellisError:
            continue                        # a clear refusal: this loss does not read that output
        except Exception as e:
            failed.append(f"target-declaration: target({tuple(out)}) raised {type(e).__name__}: {e} "
                          f"(a refusal must be a CatalogError)")
            continue
        accepted.append((tuple(out), t))
    if failed:
        return failed
    if not accepted:
        return [f"target-declaration: refused every check output shape {[list(s) for s in shapes]}"]
    rng = np.random.default_rng(0)
    for out, t in accepted[:3]:
        at = f" (output {list(out)}, target {t.kind} {list(t.shape)})"
        if t.kind == "class" and not (out and t.classes == out[-1] and t.shape == out[:-1]):
            failed.append(f"target-declaration: class targets must be the output without its last axis, with "
                          f"classes = that axis{at}")
            continue
        p = _pred(rng, (_B,) + out, t, inputs)
        y = t.example(rng, _B)
        y2 = t.example(np.random.default_rng(1), _B)
        try:
            pn = _const(p, "f32")
            yn = None if y is None else _const(y, t.dtype)
            v = loss_value(loss, pn, yn)
            g = grad([v], [pn])[0] if red != "none" and tuple(v.shape) == () else None
            vals = _run([v] + ([g] if g is not None else []))
        except Exception as e:
            failed.append(f"runs: loss(pred, y) raised {type(e).__name__}: {e}{at}")
            continue
        if red != "none":
            if tuple(v.shape) != () or v.dtype != "f32":
                failed.append(f"scalar: reduction {red!r} gave {list(v.shape)}:{v.dtype}, expected a f32 scalar{at}")
                continue
            if not np.isfinite(vals[0]):
                failed.append(f"finite: the loss is {vals[0]} on random predictions and valid targets{at}")
                continue
            if g is None or tuple(g.shape) != (_B,) + out:
                failed.append(f"gradient: no gradient of the prediction's shape{at}")
                continue
            if not np.all(np.isfinite(vals[1])):
                failed.append(f"gradient: non-finite gradient wrt the prediction{at}")
                continue
            if not np.any(vals[1]):
                failed.append(f"gradient: the gradient wrt the prediction is zero everywhere{at}")
        again = _run([loss_value(loss, _const(p, "f32"), None if y is None else _const(y, t.dtype))])[0]
        if not np.array_equal(again, vals[0]):
            failed.append(f"pure: the same inputs gave different losses{at}")
        try:                                                 # f64 stays f64 (the PyTorch comparisons need it)
            v64 = loss_value(loss, _const(p, "f64"), None if y is None else _const(y, t.dtype))
            r64 = _run([v64])[0]
            if v64.dtype != "f64":
                failed.append(f"precision: f64 predictions gave a {v64.dtype} loss (compute in pred.dtype){at}")
            elif not np.allclose(r64, vals[0], rtol=1e-4, atol=1e-5):
                failed.append(f"precision: f64 and f32 losses differ ({float(np.sum(r64))} vs "
                              f"{float(np.sum(vals[0]))}){at}")
        except Exception as e:
            failed.append(f"precision: f64 predictions raised {type(e).__name__}: {e}{at}")
        try:                                                 # f16 predictions reduce in f32
            v16 = loss_value(loss, _const(p, "f16"), None if y is None else _const(y, t.dtype))
            r16 = _run([v16])[0]
            if v16.dtype != "f32" or not np.all(np.isfinite(r16)):
                failed.append(f"f16: f16 predictions gave {v16.dtype} {r16!r}, expected a finite f32 loss{at}")
        except Exception as e:
            failed.append(f"f16: f16 predictions raised {type(e).__name__}: {e}{at}")
        if t.kind != "none":                                 # the declared target is read
            try:
                other = _run([loss_value(loss, _const(p, "f32"), _const(y2, t.dtype))])[0]
                if np.array_equal(other, vals[0]):
                    failed.append(f"target-read: other valid targets gave the same loss{at}")
            except Exception as e:
                failed.append(f"target-read: targets of the declared shape and dtype raised "
                              f"{type(e).__name__}: {e}{at}")
        failed += _check_reductions(entry, out, p, y, t)
    return failed


def _check_reductions(entry: Entry, out, p, y, t) -> builtins.list[str]:
    """sum == sum of the unreduced losses; mean == their average (default hyperparameters otherwise)."""
    rp = entry.params.get("reduction")
    if rp is None or rp.choices is None or not {"sum", "none"} <= set(rp.choices):
        return [] if rp is not None else ["reduction: a loss declares a 'reduction' Param with 'sum' and 'none'"]
    at = f" (output {list(out)})"
    try:
        vals = {}
        for r in ("none", "sum") + (("mean",) if "mean" in rp.choices else ()):
            ls = entry.make(reduction=r)
            vals[r] = _run([loss_value(ls, _const(p, "f64"), None if y is None else _const(y, t.dtype))])[0]
    except Exception as e:
        return [f"reduction: raised {type(e).__name__}: {e}{at}"]
    none = vals["none"]
    if none.ndim == 0 or none.shape[0] != _B:
        return [f"reduction: 'none' must give one loss per example (leading axis {_B}), got {list(none.shape)}{at}"]
    failed = []
    if not np.isclose(vals["sum"], none.sum(), rtol=1e-9):
        failed.append(f"reduction: 'sum' gave {float(vals['sum'])} but the unreduced losses sum to "
                      f"{float(none.sum())}{at}")
    if "mean" in vals and not np.isclose(vals["mean"], none.mean(), rtol=1e-9):
        failed.append(f"reduction: 'mean' gave {float(vals['mean'])} but the unreduced losses average "
                      f"{float(none.mean())}{at}")
    return failed
