"""Data that lives in the Python process: explicit train / val / test parts from arrays or DataFrames.

Why its own source: a notebook user holds `X_train, y_train` (or a pandas DataFrame) already split the way
they want; copying them to a file to train would lose that split and the point of a notebook. The parts
are concatenated into one `ArrayDataset` (train rows first) and the split is the given row ranges, so the
loader, evaluation and the run record work exactly as for a file. The bytes of every part are hashed
(`hash_arrays`), so a run record pins in-memory data like a file and `verify` can tell changed data.

    MemoryData.from_parts({"train": (X, y), "val": (Xv, yv)})
    MemoryData.from_parts({"train": df}, target="label")        # a DataFrame: every other column a feature
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ..errors import did_you_mean
from .info import DatasetInfo
from .dataset import ArrayDataset, DataError, Dataset, features_dtype, hash_arrays, labels_dtype

PARTS = ("train", "val", "test")
_NAMES = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*(?:,\s*([A-Za-z_][A-Za-z0-9_.]*)\s*)?$")


def parse_names(text: str) -> tuple[str, str | None] | None:
    """'X_train, y_train' -> ('X_train', 'y_train'); 'df' -> ('df', None); None when malformed."""
    m = _NAMES.match(text) if isinstance(text, str) else None
    return (m.group(1), m.group(2)) if m else None


def lookup(namespace, name: str, where: str):
    """`name` (dots allowed: `data.X`) in a namespace mapping, or a DataError with did-you-mean."""
    head, *rest = name.split(".")
    if head not in namespace:
        visible = [k for k in namespace if not k.startswith("_")]
        raise DataError(f"{head!r} is not defined in the notebook", where=where,
                        hint=did_you_mean(head, visible) or f"define {head} in a cell above, then re-run this one")
    obj = namespace[head]
    for i, attr in enumerate(rest):
        try:
            obj = getattr(obj, attr)
        except AttributeError:
            raise DataError(f"{'.'.join([head, *rest[:i]])} has no attribute {attr!r}", where=where) from None
    return obj


def _is_frame(obj) -> bool:
    return hasattr(obj, "columns") and hasattr(obj, "to_numpy") and hasattr(obj, "dtypes")


@dataclass
class MemoryData:
    """Arrays per part ({"train": (x, y or None), ...}), with what the user called them."""

    parts: dict
    labels: dict = field(default_factory=dict)   # part -> "X_train, y_train" (for messages and records)
    classes: list | None = None                  # class names when a DataFrame target held strings

    # ---- construction ----------------------------------------------------------------------------------
    @classmethod
    def from_parts(cls, given: dict, *, target: str | None = None, labels: dict | None = None,
                   where: str = "data", target_where: str | None = None) -> "MemoryData":
        """Each part is (x, y), x alone, or a DataFrame (with `target` naming its label column)."""
        unknown = [k for k in given if k not in PARTS]
        if unknown:
            raise DataError(f"in-memory data has no part {unknown[0]!r}", where=where,
                            hint=did_you_mean(unknown[0], PARTS) or "parts are train, val and test")
        if "train" not in given:
            raise DataError("in-memory data needs a train part", where=where,
                            hint='data={"train": (X_train, y_train), "val": (X_val, y_val)}')
        raw: dict[str, tuple] = {}
        frames = {}
        for part in PARTS:
            if part not in given:
                continue
            v, w = given[part], f"{where}.{part}"
            if _is_frame(v):
                frames[part] = v
                continue
            if isinstance(v, (tuple, list)) and len(v) == 2 and not np.isscalar(v[0]):
                x, y = v
            elif isinstance(v, (tuple, list)) and len(v) == 1:
                x, y = v[0], None
            else:
                x, y = v, None
            raw[part] = (_as_array(x, w, "features"), None if y is None else _as_array(y, w, "labels"))
        classes = None
        if frames:
            if target is None:
                raise DataError("a DataFrame needs target = \"<label column>\"", where=where,
                                hint="name the column that holds the labels, e.g. target = \"label\"")
            classes = _frame_classes(frames, target, target_where or where)
            for part, df in frames.items():
                raw[part] = _from_frame(df, target, classes, f"{where}.{part}")
        out = cls({k: raw[k] for k in PARTS if k in raw}, dict(labels or {}), classes)
        out._check(where)
        return out

    @classmethod
    def from_names(cls, table: dict, namespace, where_of=lambda part: f"[data] {part}") -> "MemoryData":
        """[data] train = "X_train, y_train" (val, test alike), looked up in `namespace`."""
        given, labels = {}, {}
        for part in PARTS:
            if part not in table:
                continue
            names = parse_names(table[part])
            w = where_of(part)
            if names is None:
                raise DataError(f"{part} = {table[part]!r} must name one or two variables, like \"X_train, y_train\" "
                                "or \"df\"", where=w)
            x = lookup(namespace, names[0], w)
            given[part] = x if names[1] is None else (x, lookup(namespace, names[1], w))
            labels[part] = ", ".join(n for n in names if n)
        return cls.from_parts(given, target=table.get("target"), labels=labels, where=where_of("train"),
                              target_where=where_of("target"))

    def _check(self, where: str) -> None:
        x0, y0 = self.parts["train"]
        for part, (x, y) in self.parts.items():
            w = where
            part = f"{part} ({self.labels[part]})" if part in self.labels else part
            if x.shape[0] == 0:
                raise DataError(f"the {part} part has no rows", where=w)
            if y is not None and y.shape[0] != x.shape[0]:
                raise DataError(f"the {part} features have {x.shape[0]} rows but its labels have {y.shape[0]}",
                                where=w, hint="features and labels need one row per example")
            if x.shape[1:] != x0.shape[1:]:
                raise DataError(f"the {part} examples have shape {list(x.shape[1:])} but the train examples have "
                                f"{list(x0.shape[1:])}", where=w)
            if (y is None) != (y0 is None):
                raise DataError(f"the {part} part {'has no' if y is None else 'has'} labels but the train part "
                                f"{'has' if y is None else 'has none'}", where=w)
            if y is not None and y.shape[1:] != y0.shape[1:]:
                raise DataError(f"the {part} labels have shape {list(y.shape[1:])} but the train labels have "
                                f"{list(y0.shape[1:])}", where=w)

    # ---- what the rest of the engine reads --------------------------------------------------------------
    def sizes(self) -> dict[str, int]:
        return {k: int(x.shape[0]) for k, (x, _) in self.parts.items()}

    def dataset(self) -> ArrayDataset:
        """Every part's rows in one dataset, train first (then val, test), with the task the labels give."""
        xs = np.concatenate([x for x, _ in self.parts.values()])
        ys = None if self.parts["train"][1] is None else np.concatenate([y for _, y in self.parts.values()])
        n_classes = len(self.classes) if self.classes else None
        ds = ArrayDataset(xs, ys, name=self.name, n_classes=n_classes)
        ds._content_hash = self.content_hash()
        return ds

    @property
    def name(self) -> str:
        return "memory:" + (self.labels.get("train") or "train")

    def ranges(self) -> dict[str, np.ndarray]:
        """Row indices of each part in `dataset()`."""
        out, lo = {}, 0
        for k, n in self.sizes().items():
            out[k] = np.arange(lo, lo + n, dtype=np.int64)
            lo += n
        return out

    def content_hash(self) -> str:
        """BLAKE3 of every part's features and labels (dtype, shape, bytes), by part name."""
        h = getattr(self, "_hash", None)
        if h is None:
            arrays = {}
            for k, (x, y) in self.parts.items():
                arrays[f"{k}.x"], arrays[f"{k}.y"] = x, y
            h = self._hash = hash_arrays(arrays, {"source": "memory", "classes": self.classes})
        return h

    def part_hashes(self) -> dict[str, str]:
        return {k: hash_arrays({"x": x, "y": y}) for k, (x, y) in self.parts.items()}

    def info(self) -> DatasetInfo:
        ds = self.dataset()
        return DatasetInfo(self.name, len(ds), tuple(ds.x_shape), ds.x_dtype, ds.n_classes, ds.task)

    def tensors(self) -> dict[str, np.ndarray]:
        """The arrays by '<part>.x' / '<part>.y' (what the store keeps so verify and resume need no kernel)."""
        out = {}
        for k, (x, y) in self.parts.items():
            out[f"{k}.x"] = x
            if y is not None:
                out[f"{k}.y"] = y
        return out

    @classmethod
    def from_tensors(cls, t: dict, labels: dict | None = None, classes: list | None = None) -> "MemoryData":
        parts = {k: (t[f"{k}.x"], t.get(f"{k}.y")) for k in PARTS if f"{k}.x" in t}
        return cls(parts, dict(labels or {}), classes)

    def describe(self) -> dict:
        """What a run record says about the data (names, rows, per-part hashes)."""
        return {"parts": {k: {"names": self.labels.get(k), "rows": n, "blake3": self.part_hashes()[k]}
                          for k, n in self.sizes().items()}, "classes": self.classes}


def _as_array(v, where: str, what: str) -> np.ndarray:
    if _is_frame(v) or (hasattr(v, "to_numpy") and not isinstance(v, np.ndarray)):
        v = v.to_numpy()
    try:
        a = np.asarray(v)
    except (TypeError, ValueError) as e:
        raise DataError(f"the {what} are not an array: {e}", where=where) from None
    if a.ndim == 0:
        raise DataError(f"the {what} are a single value, not rows of examples", where=where)
    if a.dtype.kind not in "biuf":
        raise DataError(f"the {what} have dtype {a.dtype}, not numbers", where=where,
                        hint="convert them to numbers first (e.g. pandas' factorize for text labels)")
    if what == "labels":
        dt, _ = labels_dtype(a.dtype)
        return np.ascontiguousarray(a.astype(dt, copy=False))
    if a.dtype.kind == "f" and not np.isfinite(a).all():
        bad = int(np.argwhere(~np.isfinite(a.reshape(a.shape[0], -1)))[0][0])
        raise DataError(f"the {what} hold NaN or infinite values (first in row {bad})", where=where,
                        hint="drop or fill missing values first")
    return np.ascontiguousarray(a.astype(features_dtype(a.dtype), copy=False))


LABEL_NAMES = ("target", "label", "labels", "class", "y", "species", "category")


def _target_hint(target: str, df) -> str:
    """A close spelling; else the columns that look like labels (a known name, or few whole or text values),
    then the columns, a long list cut with '...' and a count, so the one needed is never silently left out."""
    cols = [str(c) for c in df.columns]
    close = did_you_mean(target, cols)
    if close:
        return close

    def label_like(c) -> bool:
        v = np.asarray(df[c])
        return str(c).lower() in LABEL_NAMES or (v.dtype.kind in "iubOUS" and len(_distinct(v)) <= 50)

    labels = sorted((str(c) for c in df.columns if label_like(c)), key=lambda c: c.lower() not in LABEL_NAMES)
    shown = ", ".join(cols) if len(cols) <= 16 else ", ".join(cols[:10]) + f", ... ({len(cols) - 10} more)"
    lead = f"a column that looks like labels: {', '.join(repr(c) for c in labels[:3])}; " if labels else ""
    return f"{lead}its {len(cols)} columns: {shown}"


def _distinct(v: np.ndarray) -> np.ndarray:
    """Distinct values of a column, text included (np.unique sorts, which mixed objects refuse)."""
    try:
        return np.unique(v)
    except TypeError:
        return np.asarray(list(dict.fromkeys(v.tolist())), dtype=object)


def _frame_classes(frames: dict, target: str, where: str) -> list | None:
    """Sorted class names when the target column holds text (the same ids for every part), else None."""
    for part, df in frames.items():
        if target not in df.columns:
            raise DataError(f"the {part} DataFrame has no column {target!r}", where=where,
                            hint=_target_hint(target, df))
    col = frames["train"][target] if "train" in frames else next(iter(frames.values()))[target]
    if np.asarray(col).dtype.kind in "biuf":
        return None
    names = set()
    for df in frames.values():
        names.update(str(v) for v in df[target].tolist())
    return sorted(names)


def _from_frame(df, target: str, classes: list | None, where: str) -> tuple[np.ndarray, np.ndarray]:
    feats = [c for c in df.columns if c != target]
    if not feats:
        raise DataError(f"the DataFrame has only the target column {target!r}", where=where)
    bad = [str(c) for c in feats if np.asarray(df[c]).dtype.kind not in "biuf"]
    if bad:
        raise DataError(f"column {bad[0]!r} is not numeric ({df[bad[0]].dtype})", where=where,
                        hint="encode it as numbers or drop it (df.drop(columns=[...]))")
    x = _as_array(df[feats].to_numpy(), where, "features")
    if classes is not None:
        ids = {c: i for i, c in enumerate(classes)}
        y = np.asarray([ids[str(v)] for v in df[target].tolist()], np.int32)
    else:
        y = _as_array(df[target].to_numpy(), where, "labels")
    return x, y


class Standardized(Dataset):
    """A dataset whose features are (x - mean) / std with mean and std fitted on the training rows only.

    Why a wrapper: the statistics belong to the run (fitted once, kept in its record, applied by
    `Run.predict`), while the content hash stays the raw data's, so the same data and split always give
    the same statistics.
    """

    def __init__(self, base: Dataset, train_rows: np.ndarray, stats: dict | None = None):
        self.base = base
        for k in ("name", "task", "n_classes", "x_shape", "x_dtype", "y_shape", "y_dtype", "n_rows"):
            setattr(self, k, getattr(base, k))
        if base.x_dtype not in ("f32", "f64", "f16", "i32", "i64", "u8"):
            raise DataError(f"standardize needs numeric features, not {base.x_dtype}", where="[data] standardize")
        self.x_dtype = "f32"
        if stats is None:
            stats = fit_standardizer(base, train_rows)
        self.mean = np.asarray(stats["mean"], np.float64).reshape(self.x_shape)
        self.std = np.asarray(stats["std"], np.float64).reshape(self.x_shape)

    def stats(self) -> dict:
        return {"mean": self.mean.ravel().tolist(), "std": self.std.ravel().tolist()}

    def transform(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, np.float64).reshape((-1,) + tuple(self.x_shape))
        return ((x - self.mean) / self.std).astype(np.float32)

    def _read(self, idx):
        x, y = self.base.read(idx)
        return self.transform(x), y

    def _targets(self):
        return self.base.targets()

    def _hash(self):
        return self.base.content_hash()


def fit_standardizer(ds: Dataset, rows: np.ndarray) -> dict:
    """Per-feature mean and population std over `rows` (std 0 -> 1: a constant feature stays 0)."""
    step = max(1, (64 << 20) // max(1, ds.example_nbytes))
    n, mean, m2 = 0, None, None              # Chan et al.'s pairwise merge of (count, mean, M2) per chunk
    for lo in range(0, len(rows), step):
        x, _ = ds.read(rows[lo:lo + step])
        x = np.asarray(x, np.float64).reshape(len(x), -1)
        k, mk = len(x), x.mean(0)
        m2k = ((x - mk) ** 2).sum(0)
        if mean is None:
            n, mean, m2 = k, mk, m2k
        else:
            d = mk - mean
            tot = n + k
            mean = mean + d * (k / tot)
            m2 = m2 + m2k + d * d * (n * k / tot)
            n = tot
    if not n:
        raise DataError("standardize has no training rows to fit on", where="[data] standardize")
    std = np.sqrt(m2 / n)
    std[std < 1e-12] = 1.0
    return {"mean": mean.tolist(), "std": std.tolist()}
