"""Metrics: shared host-side helpers for metric entries, and the metric conformance checks.

Why host-side numpy: metrics read a batch's logits once it is on the host anyway (for the live curve), and
counting metrics must be exact over a whole epoch. So each metric keeps a small state of numpy arrays that
is either summed (counts, sums) or concatenated (scores for AUROC/AUPRC) across `update`s, and `merge`
combines several workers' states the same way: the result after many updates or merges equals the metric
on the concatenated data (bit-exact for counts, to float summation order for sums).

`Accumulator` is that bookkeeping, so an entry only says what to add per batch and how to turn the state
into a number. User metrics may use it or implement the interface themselves; the checker only looks at
behaviour.
"""
from __future__ import annotations

import abc
import builtins
from typing import Any

import numpy as np

from .registry import CatalogError, Param

__all__ = ["Accumulator", "AVERAGES", "AVERAGE_PARAMS", "ConfusionCounts", "AveragedRatio", "OneVsRest",
           "confusion_counts", "precision_recall_f1", "softmax", "log_softmax", "sigmoid", "as_probs", "as_logits",
           "as_targets", "predicted_class", "average_ranks"]


# ---- numerics ------------------------------------------------------------------------------------------
def softmax(z: np.ndarray, axis: int = -1) -> np.ndarray:
    """Softmax in float64, shifted by the max so large logits do not overflow."""
    z = np.asarray(z, np.float64)
    e = np.exp(z - np.max(z, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def log_softmax(z: np.ndarray, axis: int = -1) -> np.ndarray:
    z = np.asarray(z, np.float64)
    s = z - np.max(z, axis=axis, keepdims=True)
    return s - np.log(np.sum(np.exp(s), axis=axis, keepdims=True))


def sigmoid(z: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-z)) in float64, without overflow for large |z|."""
    z = np.asarray(z, np.float64)
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def as_probs(logits: np.ndarray) -> np.ndarray:
    """(N, C) class probabilities: softmax of (N, C) logits, or [1 - s, s] with s = sigmoid for (N,) logits."""
    z = np.asarray(logits, np.float64)
    if z.ndim == 1:
        s = sigmoid(z)
        return np.stack([1.0 - s, s], axis=1)
    return softmax(z, axis=1)


def predicted_class(logits: np.ndarray) -> np.ndarray:
    """argmax over classes (first index on ties); for (N,) binary logits, 1 where logit > 0."""
    z = np.asarray(logits)
    return (z > 0).astype(np.int64) if z.ndim == 1 else np.argmax(z, axis=1).astype(np.int64)


def average_ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks of a 1-D array, ties given the mean of their ranks (as in the Mann-Whitney U)."""
    x = np.asarray(x)
    order = np.argsort(x, kind="stable")
    xs = x[order]
    starts = np.flatnonzero(np.r_[True, xs[1:] != xs[:-1]])
    ends = np.r_[starts[1:], xs.size]                 # each tie group is [start, end)
    mean_rank = (starts + ends + 1) / 2.0             # mean of start+1 .. end
    ranks = np.empty(x.size, np.float64)
    ranks[order] = np.repeat(mean_rank, ends - starts)
    return ranks


# ---- counting metrics ----------------------------------------------------------------------------------
AVERAGES = ("macro", "micro", "weighted", "binary")


def confusion_counts(pred_class: np.ndarray, target: np.ndarray, n_classes: int) -> np.ndarray:
    """(C, C) int64 counts, rows = true class, columns = predicted class."""
    idx = np.asarray(target, np.int64) * n_classes + np.asarray(pred_class, np.int64)
    return np.bincount(idx, minlength=n_classes * n_classes).reshape(n_classes, n_classes).astype(np.int64)


def _divide(num: np.ndarray, den: np.ndarray, zero_division: float) -> np.ndarray:
    num, den = np.asarray(num, np.float64), np.asarray(den, np.float64)
    out = np.full(np.broadcast(num, den).shape, float(zero_division))
    np.divide(num, den, out=out, where=den != 0)
    return out


def precision_recall_f1(metric: Any, cm: np.ndarray, average: str, pos_label: int = 1,
                        zero_division: float = 0.0) -> tuple[float, float, float]:
    """Precision, recall and F1 from a confusion matrix, averaged as scikit-learn does.

    macro: unweighted mean over the classes that occur in the targets or the predictions; weighted: the
    same, weighted by each class's support; micro: from the summed counts; binary: class `pos_label` only
    (two classes required). F1 is 2 tp / (2 tp + fp + fn), and any 0/0 is `zero_division`.
    """
    cm = np.asarray(cm, np.int64)
    c = cm.shape[0]
    tp = np.diag(cm)
    pred_n, true_n = cm.sum(axis=0), cm.sum(axis=1)
    if average == "binary":
        if c != 2:
            raise CatalogError(f"average='binary' needs 2 classes, the logits have {c}", where=_where(metric),
                               hint="use average='macro', 'micro' or 'weighted' for more classes")
        if not 0 <= pos_label < c:
            raise CatalogError(f"pos_label={pos_label} is not a class of 2-class logits", where=_where(metric),
                               hint="pos_label is 0 or 1")
        sel = np.array([pos_label])
    else:
        sel = np.flatnonzero((true_n > 0) | (pred_n > 0))
    tp, pred_n, true_n = tp[sel], pred_n[sel], true_n[sel]
    if average == "micro":
        tp, pred_n, true_n = tp.sum(keepdims=True), pred_n.sum(keepdims=True), true_n.sum(keepdims=True)
    p = _divide(tp, pred_n, zero_division)
    r = _divide(tp, true_n, zero_division)
    f = _divide(2 * tp, pred_n + true_n, zero_division)
    if average == "weighted":
        w = true_n / true_n.sum() if true_n.sum() else np.zeros(len(sel))
        return float(p @ w), float(r @ w), float(f @ w)
    return float(p.mean()), float(r.mean()), float(f.mean())


# ---- input checks --------------------------------------------------------------------------------------
def _where(metric: Any) -> str:
    name = getattr(metric, "name", None) or type(metric).__name__
    return f"metric {name}"


def _host(a: Any) -> np.ndarray:
    if hasattr(a, "numpy") and not isinstance(a, np.ndarray):
        a = a.numpy()
    return np.asarray(a)


def as_logits(metric: Any, pred: Any, target: Any) -> tuple[np.ndarray, np.ndarray]:
    """Validated (float64 logits (N, C) or (N,), int64 targets (N,)) for a classification metric.

    (N, 1) logits are read as (N,) binary logits. Refuses other shapes, NaN logits and targets that are
    not class ids in range, naming the metric and the shapes.
    """
    where = _where(metric)
    z, t = _host(pred), _host(target)
    if z.ndim == 2 and z.shape[1] == 1:
        z = z[:, 0]
    if z.ndim not in (1, 2) or t.ndim != 1 or z.shape[0] != t.shape[0]:
        raise CatalogError(f"logits of shape {tuple(z.shape)} and targets of shape {tuple(t.shape)} do not fit",
                           where=where, hint="give logits (N, C), or (N,) for a binary model, and class ids (N,)")
    if z.ndim == 2 and z.shape[1] < 2:
        raise CatalogError(f"logits of shape {tuple(z.shape)} have no classes", where=where)
    if z.dtype.kind not in "fiub":
        raise CatalogError(f"logits of dtype {z.dtype} are not numbers", where=where)
    z = z.astype(np.float64)
    if np.isnan(z).any():
        raise CatalogError(f"logits of shape {tuple(z.shape)} contain NaN ({int(np.isnan(z).sum())} values)",
                           where=where, hint="the model diverged or its input has NaN; check the loss curve")
    n_classes = 2 if z.ndim == 1 else z.shape[1]
    return z, as_targets(metric, t, n_classes, tuple(z.shape))


def as_targets(metric: Any, target: Any, n_classes: int | None, pred_shape: tuple,
               ignore_index: int | None = None) -> np.ndarray:
    """int64 class ids, each in [0, n_classes) (or equal to ignore_index), or a CatalogError."""
    where = _where(metric)
    t = _host(target)
    if t.dtype.kind == "f":
        if not np.all(np.isfinite(t)) or np.any(t != np.round(t)):
            raise CatalogError(f"targets of shape {tuple(t.shape)} are not integer class ids", where=where,
                               hint="targets are class ids 0..C-1, not probabilities or one-hot rows")
    elif t.dtype.kind not in "iub":
        raise CatalogError(f"targets of dtype {t.dtype} are not class ids", where=where)
    t = t.astype(np.int64)
    valid = t if ignore_index is None else t[t != ignore_index]
    if n_classes is not None and valid.size and (valid.min() < 0 or valid.max() >= n_classes):
        bad = valid[(valid < 0) | (valid >= n_classes)]
        raise CatalogError(f"target {int(bad[0])} is out of range for logits of shape {pred_shape} "
                           f"({n_classes} classes, targets of shape {tuple(t.shape)})", where=where,
                           hint=f"targets must be in 0..{n_classes - 1}"
                                + (f" or {ignore_index} (ignored)" if ignore_index is not None else ""))
    return t


# ---- state bookkeeping ---------------------------------------------------------------------------------
class Accumulator:
    """Metric state as named numpy arrays: `summed` ones add up, `concatenated` ones append along axis 0.

    Subclasses set `summed` / `concatenated` (names), call `self._add(name=array, ...)` in `update`, and
    read `self._state` (after `self._require()`) in `compute`. reset/state_dict/load_state_dict/merge come
    from here. The state is empty until the first update.
    """

    needs = "logits"
    higher_is_better = True
    summed: tuple = ()
    concatenated: tuple = ()

    def reset(self) -> None:
        self._state: dict[str, np.ndarray] = {}
        self._chunks: dict[str, builtins.list[np.ndarray]] = {}

    def _st(self) -> dict[str, np.ndarray]:
        if not hasattr(self, "_state"):
            self.reset()
        for k, parts in self._chunks.items():       # concatenate lazily: O(total) over many updates
            if parts:
                self._state[k] = np.concatenate(([self._state[k]] if k in self._state else []) + parts)
                parts.clear()
        return self._state

    def _add(self, **arrays: np.ndarray) -> None:
        """Add one batch's contribution; all arrays are checked before any is added (no half update)."""
        if not hasattr(self, "_state"):
            self.reset()
        st = self._state
        arrays = {k: np.asarray(v) for k, v in arrays.items()}
        for k, v in arrays.items():
            if k in self.concatenated:
                parts = self._chunks.get(k)
                prev = parts[-1] if parts else st.get(k)
                ok = prev is None or prev.shape[1:] == v.shape[1:]
            elif k in self.summed:
                prev = st.get(k)
                ok = prev is None or prev.shape == v.shape
            else:
                raise CatalogError(f"state {k!r} is neither summed nor concatenated", where=_where(self))
            if not ok:
                raise CatalogError(f"this batch gives {k} of shape {v.shape}, earlier batches {prev.shape}",
                                   where=_where(self), hint="every batch must have the same number of classes")
        for k, v in arrays.items():
            if k in self.concatenated:
                self._chunks.setdefault(k, []).append(v.copy())   # joined once, when read
            else:
                st[k] = v.copy() if k not in st else np.asarray(st[k] + v)

    def _require(self) -> dict[str, np.ndarray]:
        st = self._st()
        if not st:
            raise CatalogError("compute() called before any update()", where=_where(self),
                               hint="call update(logits, targets) with at least one batch first")
        return st

    def state_dict(self) -> dict[str, np.ndarray]:
        return {k: np.array(v, copy=True) for k, v in self._st().items()}

    def load_state_dict(self, d: dict[str, np.ndarray]) -> None:
        known = set(self.summed) | set(self.concatenated)
        extra = set(d) - known
        if extra:
            raise CatalogError(f"state_dict has unknown keys {sorted(extra)}", where=_where(self),
                               hint=f"this metric's state keys are {sorted(known)}")
        self.reset()
        self._state = {k: np.array(v, copy=True) for k, v in d.items()}

    def merge(self, other: Any) -> None:
        if type(other) is not type(self):
            raise CatalogError(f"cannot merge a {type(other).__name__} into a {type(self).__name__}",
                               where=_where(self), hint="merge instances of the same metric")
        od = other.state_dict()
        self._add(**{k: v for k, v in od.items()})

    def __repr__(self) -> str:
        n = {k: v.shape for k, v in self._st().items()}
        return f"{type(self).__name__}(state={n})"


# ---- bases that entries share ---------------------------------------------------------------------------
class ConfusionCounts(Accumulator):
    """State: the (C, C) confusion matrix of predicted classes, exact integer counts summed over batches."""

    summed = ("cm",)

    def update(self, pred: np.ndarray, target: np.ndarray) -> None:
        z, t = as_logits(self, pred, target)
        self._add(cm=confusion_counts(predicted_class(z), t, 2 if z.ndim == 1 else z.shape[1]))


# the hyperparameters of precision, recall and F1 (scikit-learn's names and defaults)
AVERAGE_PARAMS = {
    "average": Param(str, "macro", choices=AVERAGES, doc="macro / micro / weighted over classes, or binary"),
    "pos_label": Param(int, 1, lo=0, doc="the positive class when average='binary'"),
    "zero_division": Param(float, 0.0, lo=0.0, hi=1.0, doc="the value of a 0/0 ratio"),
}


class AveragedRatio(ConfusionCounts):
    """Precision, recall or F1 (`ratio`) from the confusion counts, averaged by `precision_recall_f1`.

    Why counts: accumulating over batches or merging workers gives exactly the metric on all the data,
    and every average mode is computed from the same counts."""

    higher_is_better = True
    ratio = "precision"                                  # "precision", "recall" or "f1"

    def __init__(self, average="macro", pos_label=1, zero_division=0.0):
        self.average, self.pos_label, self.zero_division = average, pos_label, zero_division
        self.reset()

    def compute(self) -> float:
        cm = self._require()["cm"]
        prf = precision_recall_f1(self, cm, self.average, self.pos_label, self.zero_division)
        return prf[("precision", "recall", "f1").index(self.ratio)]


class OneVsRest(Accumulator, abc.ABC):
    """A ranking metric kept exact: every probability row and target is stored (concatenated state).

    compute() is `binary(score, positive, what)` on class 1 for two classes, else its unweighted mean over
    the classes, each against the rest (scikit-learn's multi_class='ovr', average='macro')."""

    higher_is_better = True
    concatenated = ("probs", "target")

    def __init__(self):
        self.reset()

    def update(self, pred: np.ndarray, target: np.ndarray) -> None:
        z, t = as_logits(self, pred, target)
        self._add(probs=as_probs(z), target=t)

    @abc.abstractmethod
    def binary(self, score: np.ndarray, positive: np.ndarray, what: str) -> float:
        """The metric of one class against the rest (`what` names it in errors)."""

    def compute(self) -> float:
        st = self._require()
        p, t = st["probs"], st["target"]
        if p.shape[1] == 2:
            return self.binary(p[:, 1], t == 1, "class 1 vs 0")
        return float(np.mean([self.binary(p[:, k], t == k, f"class {k} vs rest") for k in range(p.shape[1])]))


