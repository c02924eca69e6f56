"""What a loss entry declares and hands the training step, the helpers entries share, and the loss
conformance suite.

Why a declared target: the step's `y` placeholder, the loop's feeding of labels, the planner's synthetic
batch and the spec's model-vs-data check all follow what the loss says it compares against (class ids,
same-shape floats, +-1 labels, or nothing at all for losses whose model output carries every part), so
a new loss needs no change anywhere else. A loss entry's instance has:

    reduction: str                      "mean" | "sum" | "none" (the training step needs a number)
    target(out_shape) -> Target         the per-example output shape (batch excluded) -> what y must be;
                                        an output this loss cannot read is refused with a CatalogError
    __call__(pred, y) -> Node           pred [B, *out] (f32 or f64, computed in that precision), y
                                        [B, *target.shape] (or None for kind "none"), reduced
    inputs: str (optional)              what the output holds: "real" logits/values (default), "prob",
                                        "logprob" or "positive" (the conformance checks feed that)

Entries lower to `graph.functional` only, so autodiff and both backends come for free. `loss_value` is
what the engine calls: it casts f16 predictions to f32 first (losses reduce in f32).
"""
from __future__ import annotations

import builtins
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ScellisError, TargetError, did_you_mean
from .registry import CatalogError, Entry, Param, checker, get, make_entry

# what each target kind holds; `Target.check` enforces it on every batch the loop feeds
TARGET_KINDS = {
    "class": "class ids (integers in [0, classes), or ignore_index)",
    "real": "real numbers",
    "prob": "probabilities in [0, 1]",
    "dist": "probability distributions over the last axis (>= 0, summing to 1)",
    "logdist": "log-probabilities of distributions over the last axis",
    "sign": "+1 / -1 labels",
    "count": "non-negative counts or rates",
    "none": "no target: the model output carries every part the loss compares",
}
REDUCTIONS = ("mean", "sum", "none")


@dataclass(frozen=True)
class Target:
    """What the loss compares the model output with, per example (batch excluded)."""

    kind: str
    shape: tuple = ()
    classes: int | None = None          # kind "class": the number of classes (the output's last axis)
    ignore_index: int | None = None     # kind "class": a label value that contributes nothing

    def __post_init__(self):
        if self.kind not in TARGET_KINDS:
            raise CatalogError(f"unknown target kind {self.kind!r}", hint=did_you_mean(self.kind, TARGET_KINDS)
                               or f"kinds: {', '.join(TARGET_KINDS)}")
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))

    @property
    def dtype(self) -> str | None:
        """The y placeholder's dtype: i32 class ids, f32 otherwise, None without a target."""
        return None if self.kind == "none" else "i32" if self.kind == "class" else "f32"

    def describe(self) -> str:
        if self.kind == "none":
            return TARGET_KINDS["none"]
        return f"{TARGET_KINDS[self.kind]}, {self.dtype} of per-example shape {list(self.shape)}"

    def example(self, rng: np.random.Generator, batch: int) -> np.ndarray | None:
        """Valid random targets for `batch` examples (conformance checks, the planner's measured step)."""
        shape = (int(batch),) + self.shape
        k = self.kind
        if k == "none":
            return None
        if k == "class":
            return rng.integers(0, max(int(self.classes or 1), 1), size=shape).astype(np.int32)
        if k == "real":
            return rng.standard_normal(shape).astype(np.float32)
        if k == "prob":
            return rng.uniform(0.0, 1.0, size=shape).astype(np.float32)
        if k in ("dist", "logdist"):
            z = rng.standard_normal(shape)
            p = np.exp(z - z.max(axis=-1, keepdims=True)) if shape else np.ones(shape)
            p = p / p.sum(axis=-1, keepdims=True) if shape else p
            return (np.log(p) if k == "logdist" else p).astype(np.float32)
        if k == "sign":
            return np.where(rng.integers(0, 2, size=shape) == 1, 1.0, -1.0).astype(np.float32)
        return rng.poisson(2.0, size=shape).astype(np.float32)              # count

    def check(self, y: Any, batch: int | None = None, where: str = "") -> np.ndarray:
        """y as an array of this target's dtype and shape, or a TargetError saying which value is wrong."""
        if self.kind == "none":
            return None
        if y is None:
            raise TargetError(f"the loss needs targets ({self.describe()}) but the data has none",
                              where=where, hint="use a dataset with labels, or a loss without a target")
        a = np.asarray(y)
        want = math.prod(self.shape) * (a.shape[0] if a.ndim else 1)
        if a.ndim == 0 or a.size != want or (batch is not None and a.shape[0] != batch):
            raise TargetError(f"targets of shape {list(a.shape)} do not fit per-example shape {list(self.shape)}",
                              where=where, hint=f"the loss takes {self.describe()}")
        if a.dtype.kind not in "biuf":
            raise TargetError(f"targets of dtype {a.dtype} are not numbers", where=where)
        bad = None
        if self.kind == "class":
            ok = (a == np.round(a)) & (((a >= 0) & (a < (self.classes or 0))) |
                                       ((a == self.ignore_index) if self.ignore_index is not None else False))
            bad = ~ok
            need = f"integers in [0, {self.classes})" + (f" or {self.ignore_index}" if self.ignore_index is not None
                                                         else "")
        elif self.kind == "sign":
            bad, need = ~((a == 1) | (a == -1)), "+1 or -1"
        elif self.kind == "prob":
            bad, need = ~((a >= 0) & (a <= 1)), "in [0, 1]"
        elif self.kind == "count":
            bad, need = ~(a >= 0), ">= 0"
        elif self.kind == "dist":
            bad, need = ~(a >= 0), ">= 0 (a distribution)"
        if bad is not None and np.any(bad):
            i = tuple(int(j) for j in np.argwhere(bad)[0])
            hint = "map the labels to -1 and +1 (e.g. 2*y - 1)" if self.kind == "sign" else \
                f"the loss takes {self.describe()}"
            raise TargetError(f"target {a[i].item()!r} at {list(i)} is not {need}", where=where, hint=hint)
        if self.kind == "dist" and a.size:
            s = a.reshape((-1,) + self.shape[-1:]).sum(axis=-1) if self.shape else a
            if not np.allclose(s, 1.0, atol=1e-3):
                raise TargetError(f"target distributions sum to {float(s.flat[np.argmax(np.abs(s - 1))]):g}, not 1",
                                  where=where, hint="normalize each target over its last axis")
        return a.astype(np.int32 if self.dtype == "i32" else np.float32).reshape((-1,) + self.shape)


# ---- making and calling losses -----------------------------------------------------------------------
def make_loss(cfg: Any) -> Any:
    """A loss instance from a name, a {name, **params} dict, or an instance (returned as is).

    The instance gets `.name` and `.config` (its parameters as given), which regularizers such as
    label_smoothing read to remake it.
    """
    if not isinstance(cfg, (str, dict)):
        if callable(cfg) and hasattr(cfg, "target"):
            return cfg
        raise CatalogError(f"a loss is a name or a {{name, params}} table, got {type(cfg).__name__}")
    cfg = {"name": cfg} if isinstance(cfg, str) else dict(cfg)
    name = cfg.pop("name", None)
    if name is None:
        raise CatalogError("a loss table needs a name", hint='e.g. loss = { name = "huber", delta = 0.5 }')
    inst = make_entry(get("loss", name), **cfg)
    try:
        inst.name, inst.config = name, dict(cfg)
    except AttributeError:      # a __slots__ class: it still works, it just cannot be remade by name
        pass
    return inst


def recipe_loss(recipe: dict, default: str = "cross_entropy") -> Any:
    """The loss a checked [recipe] names (`loss`, configured by `loss_params`), as a catalog instance."""
    return make_loss({"name": recipe.get("loss") or default, **dict(recipe.get("loss_params") or {})})


def loss_value(loss: Any, pred, y):
    """The loss on `pred` (cast to f32 when f16: losses reduce in f32) and `y`, as a graph node."""
    from ..graph import functional as F
    if pred.dtype == "f16":
        pred = F.cast(pred, "f32")
    if y is not None and y.dtype == "f16":
        y = F.cast(y, "f32")
    return loss(pred, y)


def target_of(loss: Any, out_shape: tuple) -> Target:
    """The loss's declared target for a per-example output shape; a clear error if it is not a Target."""
    t = loss.target(tuple(int(s) for s in out_shape))
    if not isinstance(t, Target):
        raise CatalogError(f"loss {getattr(loss, 'name', type(loss).__name__)!r}: target() returned "
                           f"{type(t).__name__}, not a Target")
    return t


# ---- helpers entries share ---------------------------------------------------------------------------
def where_of(name: str) -> str:
    return f"catalog loss {name!r}"


def refuse(name: str, out_shape: tuple, need: str) -> CatalogError:
    """The error a loss raises for a model output it cannot read."""
    return CatalogError(f"loss {name!r} needs a model output {need}, got per-example shape {list(out_shape)}",
                        where=where_of(name), hint=f"make the model's last node produce {need}")


def reduce(per, reduction: str, denom=None):
    """mean (over elements, or divided by `denom`, e.g. the sum of class weights), sum, or none."""
    from ..graph import functional as F
    if reduction == "none":
        return per
    s = F.sum_(per)
    if reduction == "sum":
        return s
    return F.div(s, denom) if denom is not None else F.mean(per)


def constant(values, dtype: str):
    """A small constant vector (class weights) as graph fills: the step has no constant leaves."""
    from ..graph import functional as F
    vals = [float(v) for v in values]
    if len(set(vals)) == 1:
        return F.full((len(vals),), vals[0], dtype)
    return F.concat([F.full((1,), v, dtype) for v in vals], 0)


def as_float(y, like):
    from ..graph import functional as F
    return F.cast(y, like.dtype)


def log1p(u):
    """log(1 + u), accurate for small u (Goldberg's trick), with no NaN in either where() branch."""
    from ..graph import functional as F
    w = F.add(u, 1.0)
    d = F.sub(w, 1.0)
    one = F.eq(d, 0.0)
    safe = F.where(one, F.ones(d.shape, d.dtype), d)
    return F.where(one, u, F.div(F.mul(F.log(w), u), safe))


def softplus(x):
    """log(1 + exp(x)) without overflow: max(x, 0) + log1p(exp(-|x|))."""
    from ..graph import functional as F
    return F.add(F.relu(x), log1p(F.exp(F.neg(F.abs_(x)))))


def pick(values, y, ignore_index: int | None = None):
    """values[..., y] over the last axis for integer y of shape values.shape[:-1], and the 0/1 mask of
    labels that count (y != ignore_index); ignored labels read class 0 and are masked out."""
    from ..graph import functional as F
    nd = len(values.shape)
    y = F.cast(y, "i32")
    if ignore_index is not None:
        valid = F.ne(y, F.scalar(int(ignore_index), "i32"))
        y = F.where(valid, y, F.zeros(y.shape, "i32"))
        mask = F.cast(valid, values.dtype)
    else:
        mask = None
    got = F.gather(values, nd - 1, F.reshape(y, tuple(y.shape) + (1,)))
    return F.reshape(got, tuple(values.shape[:-1])), mask


def parts(pred, k: int) -> list:
    """pred [B, k, D] -> k nodes [B, D] (the convention of multi-input losses)."""
    from ..graph import functional as F
    return [F.getitem(pred, (slice(None), i)) for i in range(k)]


def l2_normalize(z, eps: float = 1e-12):
    """z / max(||z||_2, eps) over the last axis (torch.nn.functional.normalize)."""
    from ..graph import functional as F
    n = F.sqrt(F.sum_(F.mul(z, z), -1, keepdims=True))
    return F.div(z, F.maximum(n, F.scalar(eps, z.dtype)))


def class_loss(lp, y, weight=None, ignore_index: int | None = -100, label_smoothing: float = 0.0,
               reduction: str = "mean"):
    """torch's nll_loss (+ label smoothing) on log-probabilities lp [..., C] and class ids y [...]."""
    from ..graph import functional as F
    c = lp.shape[-1]
    picked, valid = pick(lp, y, ignore_index)
    if weight is not None:
        w = constant(weight, lp.dtype)
        wy, _ = pick(F.broadcast_to(w, lp.shape), y, ignore_index)
        wy = F.mul(wy, valid)
    else:
        w, wy = None, valid
    nll = F.neg(F.mul(picked, wy))
    smooth = None
    if label_smoothing:
        smooth = F.neg(F.sum_(F.mul(lp, w) if w is not None else lp, -1))
        smooth = F.mul(smooth, valid)
    if reduction == "none":
        out = nll
        if smooth is not None:
            out = F.add(F.mul(nll, 1.0 - label_smoothing), F.mul(smooth, label_smoothing / c))
        return out
    total = F.sum_(wy)
    red = F.sum_(nll) if reduction == "sum" else F.div(F.sum_(nll), total)
    if smooth is None:
        return red
    sm = F.sum_(smooth) if reduction == "sum" else F.div(F.sum_(smooth), total)
    return F.add(F.mul(red, 1.0 - label_smoothing), F.mul(sm, label_smoothing / c))


# ---- conformance -------------------------------------------------------------------------------------
_CHECK_OUTPUTS = ((6,), (2, 5), (3, 4), (4, 3, 5), (2,), ())
_B = 5


def _run(nodes, device="reference"):
    from ..executor.executor import realize
    from .registry import _device
    return [np.array(s.numpy()) for s in realize(list(nodes), _device(device).impl)]


def _const(a, dtype, device="reference"):
    from ..tensor import tensor
    from .registry import _device
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
    from ..graph.autodiff import grad
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


def reduction_param(default: str = "mean", extra: tuple = ()):
    """The `reduction` Param every loss declares."""
    return Param(str, default, choices=REDUCTIONS + tuple(extra),
                 doc="mean or sum for training; none gives one loss per element (API use)")


__all__ = ["Target", "TargetError", "TARGET_KINDS", "REDUCTIONS", "make_loss", "loss_value", "target_of",
           "refuse", "reduce", "constant", "as_float", "log1p", "softplus", "pick", "parts", "l2_normalize",
           "check_loss", "reduction_param", "where_of", "class_loss"]
