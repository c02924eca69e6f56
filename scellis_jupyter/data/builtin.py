"""Built-in datasets: scikit-learn's classic tabular sets, CPython's pydoc topics as text, synthetic data.

Why these: they need no download (scikit-learn ships the tabular files, CPython ships `pydoc_data`), so a
notebook runs offline and reproducibly. Synthetic sets are drawn from a Philox stream (`data`) of
`Generator(seed)`, so the same parameters give the same bytes on every machine.
Their metadata agrees with `data.info.dataset_info` (the planner's view before loading).
"""
from __future__ import annotations

import numpy as np

from ..errors import did_you_mean
from ..rng import Generator
from .info import _TABULAR, BUILTIN_DATASETS, pydoc_text, pydoc_vocab
from .dataset import ArrayDataset, DataError, Dataset, hash_arrays
from .text import load_text

TABULAR = tuple(_TABULAR)
RING_RADIUS = 2.0
NAMES = BUILTIN_DATASETS


def tabular(name: str) -> ArrayDataset:
    """digits, iris, wine or breast_cancer from scikit-learn: features f32 (digits /16 into [0, 1]), labels i32."""
    from sklearn import datasets as skd
    loaders = {"digits": skd.load_digits, "iris": skd.load_iris, "wine": skd.load_wine,
               "breast_cancer": skd.load_breast_cancer}
    if name not in loaders:
        raise DataError(f"{name!r} is not a built-in tabular dataset", hint=did_you_mean(name, loaders)
                        or f"built-ins: {', '.join(loaders)}")
    b = loaders[name]()
    x = np.asarray(b.data, dtype=np.float64)
    if name == "digits":
        x = x / 16.0
    return ArrayDataset(x.astype(np.float32), np.asarray(b.target).astype(np.int32), name=name,
                        task="classification", n_classes=_TABULAR[name][2])


def _positive(name: str, value, what: str, lo: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
        raise DataError(f"{what}={value!r} must be an integer >= {lo}", where=name)
    return int(value)


def _noise(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not np.isfinite(value) or value < 0:
        raise DataError(f"noise={value!r} must be a finite number >= 0", where=name)
    return float(value)


class PydocTopics(Dataset):
    """Next-character modelling over `pydoc_text()`: window i is tokens [i*L, i*L + L + 1); x = [:-1], y = [1:].

    Windows start every seq_len characters (the last target of one window is the first input of the
    next), so there are (len(text) - 1) // seq_len of them, as `dataset_info` says. Only the token ids
    (4 bytes a character) are held; windows are cut on demand.
    """

    name, task = "pydoc_topics", "lm"
    x_dtype = y_dtype = "i32"

    def __init__(self, seq_len: int = 128):
        self.seq_len = _positive(self.name, seq_len, "seq_len")
        self.vocab = pydoc_vocab()
        self.n_classes = len(self.vocab)
        text_len = len(pydoc_text())
        self.n_rows = (text_len - 1) // self.seq_len
        if self.n_rows < 1:
            raise DataError(f"seq_len={seq_len} is longer than the text ({text_len} characters)", where=self.name)
        self.x_shape = self.y_shape = (self.seq_len,)
        self._ids = None

    @property
    def ids(self) -> np.ndarray:
        """The text as token ids (index into `vocab`), i32."""
        if self._ids is None:
            codes = np.frombuffer(pydoc_text().encode("utf-32-le"), dtype="<u4")
            table = np.frombuffer(self.vocab.encode("utf-32-le"), dtype="<u4")
            self._ids = np.searchsorted(table, codes).astype(np.int32)
        return self._ids

    def decode(self, ids) -> str:
        """Token ids back to text."""
        return "".join(self.vocab[int(i)] for i in np.asarray(ids).reshape(-1))

    def _read(self, idx):
        starts = idx * self.seq_len
        win = self.ids[starts[:, None] + np.arange(self.seq_len + 1)[None, :]]
        return np.ascontiguousarray(win[:, :-1]), np.ascontiguousarray(win[:, 1:])

    def _targets(self):
        return None   # a label per window is a sequence: stratifying on it has no meaning

    def _hash(self):
        return hash_arrays({"ids": self.ids}, {"source": "pydoc_topics", "seq_len": self.seq_len,
                                               "vocab": self.vocab})


def synthetic_classification(n_rows: int = 1000, n_features: int = 20, n_classes: int = 2,
                             noise: float = 1.0, seed: int = 0) -> ArrayDataset:
    """Gaussian blobs: class centers ~ N(0, 2^2) per feature, x = center[y] + noise * N(0, 1).

    Labels are balanced (row r has class r mod n_classes before a Philox shuffle). Everything comes from
    the `data` stream of Generator(seed), in the order centers, label permutation, noise.
    """
    name = "synthetic_classification"
    n_rows, n_features = _positive(name, n_rows, "n_rows"), _positive(name, n_features, "n_features")
    n_classes, noise = _positive(name, n_classes, "n_classes", 2), _noise(name, noise)
    s = Generator(seed).stream("data")
    centers = 2.0 * s.normal((n_classes, n_features)).astype(np.float64)
    y = (np.arange(n_rows) % n_classes)[s.permutation(n_rows)].astype(np.int32)
    x = centers[y] + noise * s.normal((n_rows, n_features)).astype(np.float64)
    return ArrayDataset(x.astype(np.float32), y, name=name, task="classification", n_classes=n_classes)


def synthetic_regression(n_rows: int = 1000, n_features: int = 20, noise: float = 0.1,
                         seed: int = 0) -> ArrayDataset:
    """A linear target: x ~ N(0, 1), w ~ N(0, 1), y = x @ w + noise * N(0, 1); y is f32 of shape (n_rows,).

    Drawn from the `data` stream of Generator(seed), in the order weights, x, noise.
    """
    name = "synthetic_regression"
    n_rows, n_features = _positive(name, n_rows, "n_rows"), _positive(name, n_features, "n_features")
    noise = _noise(name, noise)
    s = Generator(seed).stream("data")
    w = s.normal((n_features,)).astype(np.float64)
    x = s.normal((n_rows, n_features)).astype(np.float64)
    y = x @ w + noise * s.normal((n_rows,)).astype(np.float64)
    return ArrayDataset(x.astype(np.float32), y.astype(np.float32), name=name, task="regression")


def synthetic_ring(n_rows: int = 2000, n_classes: int = 8, noise: float = 0.1, seed: int = 0,
                   radius: float = RING_RADIUS) -> ArrayDataset:
    """A ring of Gaussians in 2-D (the classic GAN mode-coverage set): mode m sits at angle 2*pi*m/n_classes
    on a circle of `radius`; x = center[y] + noise * N(0, I). y is the mode (balanced, Philox-shuffled).

    Drawn from the `data` stream of Generator(seed), in the order label permutation, noise.
    """
    name = "synthetic_ring"
    n_rows, n_classes = _positive(name, n_rows, "n_rows"), _positive(name, n_classes, "n_classes", 2)
    noise = _noise(name, noise)
    s = Generator(seed).stream("data")
    y = (np.arange(n_rows) % n_classes)[s.permutation(n_rows)].astype(np.int32)
    x = ring_centers(n_classes, radius)[y] + noise * s.normal((n_rows, 2)).astype(np.float64)
    return ArrayDataset(x.astype(np.float32), y, name=name, task="classification", n_classes=n_classes)


def ring_centers(n_modes: int, radius: float = RING_RADIUS) -> np.ndarray:
    """The modes of `synthetic_ring`, (n_modes, 2) float64."""
    a = 2.0 * np.pi * np.arange(n_modes) / n_modes
    return radius * np.stack([np.cos(a), np.sin(a)], axis=1)


def builtin(name: str, data: dict | None = None) -> Dataset:
    """A built-in dataset by name, parameterised by the spec's [data] table (seq_len, n_rows, ...)."""
    data = data or {}
    if name in TABULAR:
        return tabular(name)
    if name == "pydoc_topics":
        return PydocTopics(data.get("seq_len", 128))
    if name == "pydoc_sentences":                     # text: needs a tokenizer (data/text.py)
        return load_text(name, data)
    seed = data.get("seed", 0)
    if name == "synthetic_classification":
        return synthetic_classification(data.get("n_rows", 1000), data.get("n_features", 20),
                                        data.get("n_classes", 2), data.get("noise", 1.0), seed)
    if name == "synthetic_regression":
        return synthetic_regression(data.get("n_rows", 1000), data.get("n_features", 20),
                                    data.get("noise", 0.1), seed)
    if name == "synthetic_ring":
        return synthetic_ring(data.get("n_rows", 2000), data.get("n_classes", 8), data.get("noise", 0.1), seed)
    raise DataError(f"{name!r} is not a built-in dataset", hint=did_you_mean(name, NAMES)
                    or f"built-ins: {', '.join(NAMES)}")
