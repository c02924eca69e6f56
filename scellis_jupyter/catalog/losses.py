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

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import TargetError, did_you_mean
from .registry import CatalogError, Param, get, make_entry
from ..graph import functional as F

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
            ok = ((a >= 0) & (a < (self.classes or 0))) | \
                ((a == self.ignore_index) if self.ignore_index is not None else False)
            if a.dtype.kind == "f":             # integers are whole already
                ok &= a == np.round(a)
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
        if bad is not None and bad.any():
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
    if reduction == "none":
        return per
    s = F.sum_(per)
    if reduction == "sum":
        return s
    return F.div(s, denom) if denom is not None else F.mean(per)


def constant(values, dtype: str):
    """A small constant vector (class weights) as graph fills: the step has no constant leaves."""
    vals = [float(v) for v in values]
    if len(set(vals)) == 1:
        return F.full((len(vals),), vals[0], dtype)
    return F.concat([F.full((1,), v, dtype) for v in vals], 0)


def as_float(y, like):
    return F.cast(y, like.dtype)


def log1p(u):
    """log(1 + u), accurate for small u (Goldberg's trick), with no NaN in either where() branch."""
    w = F.add(u, 1.0)
    d = F.sub(w, 1.0)
    one = F.eq(d, 0.0)
    safe = F.where(one, F.ones(d.shape, d.dtype), d)
    return F.where(one, u, F.div(F.mul(F.log(w), u), safe))


def softplus(x):
    """log(1 + exp(x)) without overflow: max(x, 0) + log1p(exp(-|x|))."""
    return F.add(F.relu(x), log1p(F.exp(F.neg(F.abs_(x)))))


def pick(values, y, ignore_index: int | None = None):
    """values[..., y] over the last axis for integer y of shape values.shape[:-1], and the 0/1 mask of
    labels that count (y != ignore_index); ignored labels read class 0 and are masked out."""
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
    return [F.getitem(pred, (slice(None), i)) for i in range(k)]


def l2_normalize(z, eps: float = 1e-12):
    """z / max(||z||_2, eps) over the last axis (torch.nn.functional.normalize)."""
    n = F.sqrt(F.sum_(F.mul(z, z), -1, keepdims=True))
    return F.div(z, F.maximum(n, F.scalar(eps, z.dtype)))


def class_loss(lp, y, weight=None, ignore_index: int | None = -100, label_smoothing: float = 0.0,
               reduction: str = "mean"):
    """torch's nll_loss (+ label smoothing) on log-probabilities lp [..., C] and class ids y [...]."""
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


def reduction_param(default: str = "mean", extra: tuple = ()):
    """The `reduction` Param every loss declares."""
    return Param(str, default, choices=REDUCTIONS + tuple(extra),
                 doc="mean or sum for training; none gives one loss per element (API use)")


__all__ = ["Target", "TargetError", "TARGET_KINDS", "REDUCTIONS", "make_loss", "loss_value", "target_of",
           "refuse", "reduce", "constant", "as_float", "log1p", "softplus", "pick", "parts", "l2_normalize",
           "reduction_param", "where_of", "class_loss"]
