"""Train/val/test splits as versioned, content-addressed artifacts.

Why an artifact: a run record names the exact examples it trained and evaluated on. The split hash is
BLAKE3 over (format version, dataset hash, fractions, seed, stratify, and the index arrays themselves),
so the same data and seed give the same name in any process, and any change to what is in a part changes
it. Parts are always processed in sorted-name order, so a fractions dict's key order never matters.
The permutation is the `shuffle` stream of `Generator(seed)` (Philox), never numpy's RNG.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import blake3
import numpy as np

from ..rng import Generator
from .dataset import DataError, Dataset, canonical_json
from ..errors import did_you_mean

VERSION = 1
DEFAULT_FRACTIONS = {"train": 0.8, "val": 0.1, "test": 0.1}


@dataclass(frozen=True)
class Split:
    """Index arrays per part (sorted, int64) and the hash naming them."""

    dataset_hash: str
    fractions: dict
    seed: int
    stratify: bool
    parts: dict = field(repr=False)
    hash: str = ""
    version: int = VERSION

    def __getitem__(self, part: str) -> np.ndarray:
        if part not in self.parts:
            raise DataError(f"the split has no part {part!r}", where=f"split {self.hash[:12]}",
                            hint=did_you_mean(part, self.parts) or f"parts: {', '.join(self.parts)}")
        return self.parts[part]

    def sizes(self) -> dict[str, int]:
        return {k: int(v.size) for k, v in self.parts.items()}

    def to_dict(self) -> dict:
        """A JSON-able form (indices as lists) that `from_dict` turns back and re-verifies."""
        return {"version": self.version, "hash": self.hash, "dataset_hash": self.dataset_hash,
                "fractions": dict(self.fractions), "seed": self.seed, "stratify": self.stratify,
                "parts": {k: [int(i) for i in v] for k, v in self.parts.items()}}

    @classmethod
    def from_dict(cls, d: dict) -> "Split":
        try:
            version = int(d["version"])
            parts = {str(k): np.asarray(v, dtype=np.int64).reshape(-1) for k, v in d["parts"].items()}
            args = (str(d["dataset_hash"]), {str(k): float(v) for k, v in d["fractions"].items()},
                    int(d["seed"]), bool(d["stratify"]))
            claimed = str(d["hash"])
        except (KeyError, TypeError, ValueError) as e:
            raise DataError(f"not a split record: {type(e).__name__}: {e}", where="Split.from_dict") from None
        if version != VERSION:
            raise DataError(f"split format version {version} is not supported (this is version {VERSION})",
                            where="Split.from_dict", hint="upgrade scellis-jupyter to read it")
        h = split_hash(*args, parts)
        if h != claimed:
            raise DataError("the split's contents do not match its hash (edited or corrupted)",
                            where="Split.from_dict", hint=f"recorded {claimed[:16]}…, contents give {h[:16]}…")
        return cls(*args, parts=parts, hash=h, version=version)


def split_hash(dataset_hash: str, fractions: dict, seed: int, stratify: bool, parts: dict) -> str:
    h = blake3.blake3(b"scellis-split-v%d\0" % VERSION)
    h.update(canonical_json({"dataset": dataset_hash, "seed": int(seed), "stratify": bool(stratify),
                             "fractions": {k: repr(float(v)) for k, v in fractions.items()}}))
    for k in sorted(parts):
        a = np.asarray(parts[k], dtype="<i8")
        h.update(canonical_json([k, int(a.size)]))
        h.update(a.tobytes())
    return h.hexdigest()


def _check_fractions(fractions) -> dict[str, float]:
    if not isinstance(fractions, dict) or not fractions:
        raise DataError(f"fractions must be a non-empty table of part -> fraction, got {fractions!r}",
                        where="split", hint='e.g. {"train": 0.8, "val": 0.1, "test": 0.1}')
    out = {}
    for k, v in fractions.items():
        if not isinstance(k, str) or not k:
            raise DataError(f"part names are non-empty strings, got {k!r}", where="split")
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
                or not math.isfinite(v) or not 0 <= v <= 1:
            raise DataError(f"fraction of {k!r} is {v!r}; fractions are numbers in [0, 1]", where="split")
        out[k] = float(v)
    total = math.fsum(out.values())
    if abs(total - 1.0) > 1e-6:
        raise DataError(f"fractions sum to {total:g}, not 1", where="split",
                        hint="make the parts add up to 1, e.g. train 0.8, val 0.1, test 0.1")
    return out


def largest_remainder(n: int, fracs: list[float]) -> np.ndarray:
    """Integer counts summing to n, each floor or ceil of n*f (largest fractional parts round up, ties
    to the earlier part)."""
    exact = np.round(np.array(fracs, np.float64) * n, 9)
    counts = np.floor(exact).astype(np.int64)
    rest = int(n - counts.sum())
    order = sorted(range(len(fracs)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[:rest]:
        counts[i] += 1
    return counts


def stratified_counts(class_sizes: np.ndarray, fracs: list[float]) -> np.ndarray:
    """A [classes, parts] table: row c sums to class_sizes[c], column p to largest_remainder(n)[p], every
    cell floor or ceil of class_sizes[c] * fracs[p] (a controlled rounding, found by max-flow)."""
    exact = np.round(np.outer(class_sizes, fracs), 9)
    table = np.floor(exact).astype(np.int64)
    row_need = class_sizes - table.sum(1)
    col_need = largest_remainder(int(class_sizes.sum()), fracs) - table.sum(0)
    frac = exact - table
    C, P = table.shape
    can = frac > 1e-9                                  # cells that may round up (capacity 1)
    up = np.zeros_like(table)
    cells = sorted(((c, p) for c in range(C) for p in range(P) if can[c, p]),
                   key=lambda cp: (-frac[cp], cp))
    row_left, col_left = row_need.copy(), col_need.copy()
    for c, p in cells:                                 # greedy start, then augmenting paths
        if row_left[c] > 0 and col_left[p] > 0:
            up[c, p], row_left[c], col_left[p] = 1, row_left[c] - 1, col_left[p] - 1
    for c in range(C):
        while row_left[c] > 0:
            path = _augment(c, can, up, col_left)
            if path is None:
                break
            for (rc, p, sign) in path:
                up[rc, p] += sign
            col_left[path[-1][1]] -= 1
            row_left[c] -= 1
    for c in range(C):                                 # infeasible margins (not expected): keep rows exact
        for p in sorted(range(P), key=lambda p: -frac[c, p]):
            if row_left[c] > 0 and can[c, p] and not up[c, p]:
                up[c, p], row_left[c] = 1, row_left[c] - 1
    return table + up


def _augment(c0: int, can, up, col_left):
    """A path c0 -> p (+1) -> c (-1) -> p' (+1) ... ending at a part with room, as (class, part, ±1)."""
    C, P = can.shape
    seen_p: set[int] = set()
    stack = [(c0, [])]
    while stack:
        c, path = stack.pop()
        for p in range(P):
            if p in seen_p or not can[c, p] or up[c, p]:
                continue
            seen_p.add(p)
            step = path + [(c, p, 1)]
            if col_left[p] > 0:
                return step
            for c2 in range(C):
                if up[c2, p] and c2 != c:
                    stack.append((c2, step + [(c2, p, -1)]))
    return None


def split(dataset: Dataset, fractions: dict | None = None, seed: int = 0, stratify: bool = False) -> Split:
    """Split `dataset` into parts by `fractions` using Generator(seed)'s `shuffle` stream.

    Sizes follow `largest_remainder`; with `stratify`, each class is divided in the same proportions
    (every part's count of a class is within one example of fraction * class size).
    """
    if not isinstance(dataset, Dataset):
        raise DataError(f"split() takes a Dataset, got {type(dataset).__name__}", where="split",
                        hint="load one with load_dataset(name_or_path)")
    fr = _check_fractions(DEFAULT_FRACTIONS if fractions is None else fractions)
    names = sorted(fr)
    fracs = [fr[k] for k in names]
    n = len(dataset)
    perm = Generator(seed).stream("shuffle").permutation(n)
    parts: dict[str, np.ndarray] = {}
    if not stratify:
        counts = largest_remainder(n, fracs)
        edges = np.concatenate([[0], np.cumsum(counts)])
        for i, k in enumerate(names):
            parts[k] = np.sort(perm[edges[i]:edges[i + 1]])
    else:
        y = dataset.targets()
        if y is None or dataset.task != "classification" or np.asarray(y).ndim != 1:
            raise DataError(f"cannot stratify {dataset.name!r}: it has no class labels (task {dataset.task})",
                            where="split", hint="use stratify=False")
        y = np.asarray(y)
        classes = np.unique(y)
        yp = y[perm]
        members = [perm[yp == c] for c in classes]        # each class in permuted order
        table = stratified_counts(np.array([m.size for m in members], np.int64), fracs)
        chunks: dict[str, list] = {k: [] for k in names}
        for c, m in enumerate(members):
            edges = np.concatenate([[0], np.cumsum(table[c])])
            for i, k in enumerate(names):
                chunks[k].append(m[edges[i]:edges[i + 1]])
        for k in names:
            parts[k] = np.sort(np.concatenate(chunks[k])).astype(np.int64)
    parts = {k: parts[k] for k in fr}                       # the caller's order, for display
    dh = dataset.content_hash()
    return Split(dh, fr, int(seed), bool(stratify), parts=parts,
                 hash=split_hash(dh, fr, int(seed), bool(stratify), parts))
