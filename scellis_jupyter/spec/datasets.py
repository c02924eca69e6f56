"""Dataset metadata a spec needs before any data is loaded: rows, feature shape and dtype, classes, task.

Why metadata only: shape inference and the memory plan run before a single batch is read, so a model
can be checked against its data in the spec cell. The classic tabular sets' sizes are facts about those
datasets (scikit-learn need not be installed); the text set is measured from CPython's own docs.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import did_you_mean
from .schema import KNOWN, SpecError


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    n_rows: int | None
    feature_shape: tuple | None      # per example, batch excluded
    feature_dtype: str | None
    n_classes: int | None            # classes, or the vocabulary size for language modelling
    task: str                        # classification | regression | lm | unknown


# (rows, features, classes): the well-known sizes of the classic sets
_TABULAR = {
    "digits": (1797, 64, 10),
    "iris": (150, 4, 3),
    "wine": (178, 13, 3),
    "breast_cancer": (569, 30, 2),
}


# a fixed vocabulary: newline and printable ASCII (96 token ids), the same on every Python version, so a
# spec's embedding and output sizes do not depend on which CPython's docs are installed
PYDOC_VOCAB = "\n" + "".join(chr(c) for c in range(32, 127))


@functools.lru_cache(maxsize=1)
def pydoc_text() -> str:
    """The text of CPython's `pydoc_data.topics`, topics in sorted order, one blank line apart; characters
    outside the vocabulary (tabs, typographic quotes, a few symbols) read as '?'."""
    from pydoc_data.topics import topics
    text = "\n\n".join(topics[k] for k in sorted(topics))
    keep = set(PYDOC_VOCAB)
    return "".join(c if c in keep else "?" for c in text)


def pydoc_vocab() -> str:
    """The vocabulary: index = token id."""
    return PYDOC_VOCAB


def dataset_info(name_or_path: str, data: dict | None = None, *, where: str = "",
                 base_dir: str | os.PathLike | None = None) -> DatasetInfo:
    """Metadata of a built-in dataset or a file; `data` is the spec's [data] table (seq_len, n_rows, ...)."""
    data = data or {}
    name = name_or_path
    if name in _TABULAR:
        rows, feats, classes = _TABULAR[name]
        return DatasetInfo(name, rows, (feats,), "f32", classes, "classification")
    if name == "pydoc_topics":
        seq_len = int(data.get("seq_len", 128))
        text = pydoc_text()
        return DatasetInfo(name, (len(text) - 1) // seq_len, (seq_len,), "i32", len(pydoc_vocab()), "lm")
    if name == "synthetic_classification":
        return DatasetInfo(name, int(data.get("n_rows", 1000)), (int(data.get("n_features", 20)),), "f32",
                           int(data.get("n_classes", 2)), "classification")
    if name == "synthetic_regression":
        return DatasetInfo(name, int(data.get("n_rows", 1000)), (int(data.get("n_features", 20)),), "f32",
                           None, "regression")
    if name == "synthetic_ring":
        return DatasetInfo(name, int(data.get("n_rows", 2000)), (2,), "f32", int(data.get("n_classes", 8)),
                           "classification")
    path = Path(name)
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    if not path.exists():
        looks_like_name = not any(c in name for c in "/\\.")
        hint = did_you_mean(name, KNOWN["dataset"]) if looks_like_name else ""
        raise SpecError(f"dataset {name!r} is neither a built-in dataset nor an existing file ({path})",
                        where=where, hint=hint or f"built-ins: {', '.join(KNOWN['dataset'])}",
                        kind="unknown-dataset", path=str(path))
    return _file_info(path, data)


def _file_info(path: Path, data: dict) -> DatasetInfo:
    """What can be read cheaply from a file's header; unknown fields stay None."""
    suffix = path.suffix.lower()
    if suffix == ".npz":
        import numpy as np
        with np.load(path, allow_pickle=False) as z:
            xkey = next((k for k in ("x", "X", "features", "inputs") if k in z.files), None)
            ykey = next((k for k in ("y", "Y", "labels", "targets") if k in z.files), None)
            if xkey is None:
                return DatasetInfo(path.name, None, None, None, None, "unknown")
            x = z[xkey]
            dtype = "i32" if x.dtype.kind in "iu" else "f32"
            classes, task = None, "unknown"
            if ykey is not None:
                y = z[ykey]
                if y.dtype.kind in "iub":
                    classes, task = int(len(np.unique(y))), "classification"
                else:
                    task = "regression"
            return DatasetInfo(path.name, int(x.shape[0]), tuple(int(s) for s in x.shape[1:]), dtype, classes, task)
    if suffix in (".csv", ".tsv"):
        sep = "\t" if suffix == ".tsv" else ","
        with open(path, encoding="utf-8") as f:
            header = f.readline().rstrip("\n").split(sep)
            rows = sum(1 for line in f if line.strip())
        n_feat = len(header) - 1 if len(header) > 1 else len(header)
        return DatasetInfo(path.name, rows, (n_feat,), "f32", None, "unknown")
    return DatasetInfo(path.name, None, None, None, None, "unknown")
