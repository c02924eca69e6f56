"""The `Dataset` abstraction every source (built-in, arrays, files) presents to splits and loaders.

Why one small interface: a split needs only `len`, the labels and a content hash; a loader needs only
`read(indices)` and the bytes per example. Sources that can be read in pieces implement `_read` without
loading everything, so a dataset larger than memory still trains. The content hash names the data in run
records and split artifacts: BLAKE3 over a canonical serialization (arrays: dtype, shape, little-endian
C-order bytes; files: reading options + file bytes), computed once and cached.
"""
from __future__ import annotations

import abc
import json
import math
import os
from pathlib import Path
from typing import Iterable, Sequence

import blake3
import numpy as np

from ..errors import DataError
from .info import DatasetInfo

_HASH_TAG = b"scellis-dataset-v1\0"
_CHUNK = 1 << 20


def canonical_json(obj) -> bytes:
    """Sorted keys, no whitespace, floats by repr: the same bytes for the same value in any process."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def hash_arrays(arrays: dict[str, np.ndarray | None], meta: dict | None = None) -> str:
    """BLAKE3 over (meta, then per name in sorted order: name, dtype, shape, little-endian C bytes)."""
    h = blake3.blake3(_HASH_TAG + b"arrays\0")
    h.update(canonical_json(meta or {}))
    for name in sorted(arrays):
        a = arrays[name]
        if a is None:
            h.update(canonical_json([name, None]))
            continue
        a = np.asarray(a)
        le = a.astype(a.dtype.newbyteorder("<"), copy=False)
        h.update(canonical_json([name, le.dtype.str, list(le.shape)]))
        flat = np.ascontiguousarray(le).reshape(-1)
        step = max(1, _CHUNK // max(1, le.dtype.itemsize))
        for i in range(0, flat.size, step):
            h.update(flat[i:i + step].tobytes())
    return h.hexdigest()


def hash_files(paths: Sequence[Path], options: dict, root: Path | None = None) -> str:
    """BLAKE3 over (reading options, then per file: its path relative to root (when given), size, bytes).

    A single file is named by its bytes alone, so a copy under another name has the same hash.
    """
    h = blake3.blake3(_HASH_TAG + b"files\0")
    h.update(canonical_json(options))
    for p in paths:
        p = Path(p)
        name = p.relative_to(root).as_posix() if root is not None else ""
        h.update(canonical_json([name, p.stat().st_size]))
        with open(p, "rb") as f:
            while chunk := f.read(_CHUNK):
                h.update(chunk)
    return h.hexdigest()


def as_indices(indices, n: int, where: str = "") -> np.ndarray:
    """Indices as a 1-D int64 array, each in [0, n), or a DataError saying which one is not."""
    idx = np.asarray(indices)
    if idx.ndim == 0:
        idx = idx.reshape(1)
    if idx.ndim != 1:
        raise DataError(f"indices must be 1-D, got shape {idx.shape}", where=where)
    if idx.size and idx.dtype.kind not in "iu":
        raise DataError(f"indices must be integers, got dtype {idx.dtype}", where=where)
    idx = idx.astype(np.int64, copy=False)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        bad = int(idx[(idx < 0) | (idx >= n)][0])
        raise DataError(f"index {bad} is out of range for a dataset of {n} rows", where=where,
                        hint=f"indices go from 0 to {n - 1}")
    return idx


class Dataset(abc.ABC):
    """Rows of (x, y) examples. Subclasses set the fields below and implement `_read` and `_hash`.

    Shapes are per example (batch excluded), as in `DatasetInfo.feature_shape`; y is None for sources
    without a target.
    """

    name: str = "dataset"
    task: str = "unknown"                # classification | regression | lm | unknown
    n_classes: int | None = None         # classes, or vocabulary size for lm
    x_shape: tuple = ()
    x_dtype: str = "f32"
    y_shape: tuple | None = None
    y_dtype: str | None = None
    n_rows: int = 0

    # ---- each source implements these (a subclass without them cannot be made) ---------------------
    @abc.abstractmethod
    def _read(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(x, y) of rows `idx`, in that order; y None without a target."""

    @abc.abstractmethod
    def _hash(self) -> str:
        """The content hash of the source (what a split and a run record pin)."""

    def _targets(self) -> np.ndarray | None:
        """All labels; the default reads in pieces and keeps only y (sources override when cheaper)."""
        if self.y_shape is None:
            return None
        step = max(1, (64 << 20) // max(1, self.example_nbytes))
        parts = [self._read(np.arange(i, min(i + step, self.n_rows)))[1] for i in range(0, self.n_rows, step)]
        return np.concatenate(parts) if parts else np.zeros((0,) + tuple(self.y_shape), _np(self.y_dtype))

    # ---- public ------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.n_rows)

    @property
    def shapes(self) -> dict[str, tuple | None]:
        return {"x": tuple(self.x_shape), "y": None if self.y_shape is None else tuple(self.y_shape)}

    @property
    def dtypes(self) -> dict[str, str | None]:
        return {"x": self.x_dtype, "y": self.y_dtype}

    @property
    def example_nbytes(self) -> int:
        """Bytes of one example (x and y) as `read` returns it."""
        b = math.prod(self.x_shape) * np.dtype(_np(self.x_dtype)).itemsize
        if self.y_shape is not None:
            b += math.prod(self.y_shape) * np.dtype(_np(self.y_dtype)).itemsize
        return int(b)

    @property
    def nbytes(self) -> int:
        """Bytes of the whole dataset as arrays (what loading it entirely would cost)."""
        return self.example_nbytes * len(self)

    def read(self, indices: Iterable[int]) -> tuple[np.ndarray, np.ndarray | None]:
        """The examples at `indices`, in that order: x [k, *x_shape], y [k, *y_shape] (or None)."""
        idx = as_indices(indices, len(self), where=self.name)
        x, y = self._read(idx)
        return x, y

    def targets(self) -> np.ndarray | None:
        """Every label (for stratified splits and class counts) without reading the features."""
        return self._targets()

    def content_hash(self) -> str:
        """BLAKE3 hex digest naming the content (cached: sources are treated as immutable)."""
        h = getattr(self, "_content_hash", None)
        if h is None:
            h = self._hash()
            self._content_hash = h
        return h

    def info(self) -> DatasetInfo:
        """The same metadata the spec's `dataset_info` gives, measured from the loaded source."""
        return DatasetInfo(self.name, len(self), tuple(self.x_shape), self.x_dtype, self.n_classes, self.task)

    def __repr__(self) -> str:
        y = "" if self.y_shape is None else f", y={self.y_shape}:{self.y_dtype}"
        return f"<{type(self).__name__} {self.name!r}: {len(self)} rows, x={tuple(self.x_shape)}:{self.x_dtype}{y}>"


class ArrayDataset(Dataset):
    """In-memory arrays (the built-in tabular and synthetic sets, NPZ files, user arrays)."""

    def __init__(self, x: np.ndarray, y: np.ndarray | None = None, *, name: str = "arrays",
                 task: str | None = None, n_classes: int | None = None):
        x = np.ascontiguousarray(x)
        if x.ndim < 1:
            raise DataError("x needs a leading row axis", where=name)
        if y is not None:
            y = np.ascontiguousarray(y)
            if y.ndim < 1 or y.shape[0] != x.shape[0]:
                raise DataError(f"x has {x.shape[0]} rows but y has shape {y.shape}", where=name,
                                hint="x and y need the same number of rows")
        self.x, self.y, self.name = x, y, name
        self.n_rows = int(x.shape[0])
        self.x_shape, self.x_dtype = tuple(x.shape[1:]), _canon(x.dtype)
        if y is None:
            self.task = task or "unknown"
        else:
            self.y_shape, self.y_dtype = tuple(y.shape[1:]), _canon(y.dtype)
            self.task = task or ("classification" if y.dtype.kind in "iu" else "regression")
        if n_classes is None and self.task == "classification" and y is not None and y.size:
            n_classes = int(len(np.unique(y)))
        self.n_classes = n_classes

    def _read(self, idx):
        return self.x[idx], None if self.y is None else self.y[idx]

    def _targets(self):
        return self.y

    def _hash(self):
        return hash_arrays({"x": self.x, "y": self.y})


_NP = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i32": np.int32, "i64": np.int64,
       "u8": np.uint8, "bool": np.bool_}


def _np(name: str):
    return _NP[name]


def _canon(dtype) -> str:
    dtype = np.dtype(dtype)
    for k, v in _NP.items():
        if np.dtype(v) == dtype:
            return k
    raise DataError(f"unsupported array dtype {dtype}", hint="use float32 features and int32 labels")


def features_dtype(dtype) -> np.dtype:
    """What a file's feature dtype becomes: integers -> i32, everything else -> f32 (as dataset_info)."""
    return np.dtype(np.int32) if np.dtype(dtype).kind in "iu" else np.dtype(np.float32)


def labels_dtype(dtype) -> tuple[np.dtype, str]:
    """A label array's dtype and task: integers/bools -> (i32, classification), floats -> (f32, regression)."""
    return ((np.dtype(np.int32), "classification") if np.dtype(dtype).kind in "iub"
            else (np.dtype(np.float32), "regression"))


def resolve(path: str | os.PathLike, base_dir: str | os.PathLike | None) -> Path:
    p = Path(path).expanduser()
    if not p.is_absolute() and base_dir is not None:
        p = Path(base_dir) / p
    return p
