"""Epoch iterators of (x, y) numpy batches with exact resume, weighted sampling and a memory budget.

Why the order comes from the generator: each epoch's order is drawn from `generator.stream("shuffle")`
at a recorded stream position, so `generator.state_dict()` plus `loader.state_dict()` (epoch, batches
done, where the order was drawn) is enough for a fresh loader to replay exactly the remaining batches.
Augmentation hooks draw from `generator.stream("augment")`, whose position the generator state carries.

Memory: with `memory_budget` the loader reads a prefetch window of whole batches at a time, sized so
that the window plus the last batch handed out (which the consumer may still hold) fit the budget, and
keeps the accounting (`resident_bytes`, `peak_resident_bytes`, `bytes_read`) of example bytes it held.
Batches handed out from a window of several are copies, so a batch the consumer keeps does not keep the
whole window alive.
A dataset larger than its budget is therefore trained on without being loaded whole (for sources that
read in pieces; see `files.py`).
"""
from __future__ import annotations

import math
from typing import Callable, Iterator, Sequence

import blake3
import numpy as np

from ..rng import Generator
from .dataset import DataError, Dataset, as_indices

Transform = Callable[[np.ndarray, "np.ndarray | None", object], tuple]
STATE_VERSION = 1


class Batches:
    """Batches of `dataset` rows `indices` (all rows when None); iterate once per epoch.

    `weights` (one per index, >= 0) switches to sampling len(indices) examples with replacement, with
    probability proportional to weight, from the shuffle stream. `transforms` are `t(x, y, stream) ->
    (x, y)` callables applied to each batch as it is handed out, `stream` being the augment stream.
    `rows_only` yields each batch's dataset row ids instead of reading them (for a dataset that already
    lives on the device; the order, and so exact resume, is the same as when reading).
    """

    def __init__(self, dataset: Dataset, indices: Sequence[int] | np.ndarray | None = None, batch_size: int = 32,
                 generator: Generator | int | None = None, shuffle: bool = True, drop_last: bool = False,
                 memory_budget: int | None = None, weights: Sequence[float] | np.ndarray | None = None,
                 transforms: Sequence[Transform] = (), rows_only: bool = False):
        if not isinstance(dataset, Dataset):
            raise DataError(f"Batches() takes a Dataset, got {type(dataset).__name__}", where="Batches",
                            hint="load one with load_dataset(name_or_path)")
        self.dataset = dataset
        self.indices = (np.arange(len(dataset), dtype=np.int64) if indices is None
                        else as_indices(indices, len(dataset), where="Batches(indices)"))
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise DataError(f"batch_size={batch_size!r} must be an integer >= 1", where="Batches")
        self.batch_size = int(batch_size)
        if generator is None or isinstance(generator, (int, np.integer)):
            generator = Generator(int(generator or 0))
        if not isinstance(generator, Generator):
            raise DataError(f"generator must be a scellis Generator or a seed, got {type(generator).__name__}",
                            where="Batches", hint="pass sc.rng.Generator(seed)")
        self.generator = generator
        self.shuffle, self.drop_last = bool(shuffle), bool(drop_last)
        self.weights = None if weights is None else self._check_weights(weights)
        self.transforms = list(transforms)
        self.rows_only = bool(rows_only)
        if self.rows_only and (self.transforms or memory_budget is not None):
            raise DataError("rows_only batches are not read on the host, so they take no transforms or memory "
                            "budget", where="Batches", hint="stream the data (placement = \"stream\") to "
                                                            "augment it or bound its host memory")
        for t in self.transforms:
            if not callable(t):
                raise DataError(f"transform {t!r} is not callable", where="Batches",
                                hint="a transform is a function t(x, y, stream) -> (x, y)")
        n = self.indices.size
        self._n_batches = n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)
        self.batch_nbytes = self.batch_size * dataset.example_nbytes
        self.memory_budget = None if memory_budget is None else int(memory_budget)
        if self.memory_budget is not None:
            if self.memory_budget < 2 * self.batch_nbytes:
                fit = self.memory_budget // (2 * max(1, dataset.example_nbytes))
                raise DataError(f"memory_budget={self.memory_budget} bytes cannot hold two batches of "
                                f"{self.batch_size} examples ({self.batch_nbytes} bytes each)",
                                where="Batches", hint=f"use batch_size <= {fit} or memory_budget >= "
                                                      f"{2 * self.batch_nbytes}")
            self.window_batches = self.memory_budget // self.batch_nbytes - 1
        else:
            self.window_batches = 1
        self.epoch, self.position = 0, 0
        self._order_offset: int | None = None
        self._order: np.ndarray | None = None
        self.resident_bytes = self.peak_resident_bytes = self.bytes_read = 0

    def _check_weights(self, weights) -> np.ndarray:
        w = np.asarray(weights, dtype=np.float64).reshape(-1)
        if w.size != self.indices.size:
            raise DataError(f"{w.size} weights for {self.indices.size} examples", where="Batches(weights)",
                            hint="give one weight per index")
        if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise DataError("weights must be finite, >= 0, and not all zero", where="Batches(weights)")
        return w

    def __len__(self) -> int:
        """Batches per epoch."""
        return self._n_batches

    # ---- order -------------------------------------------------------------------------------------
    def _draw(self, offset: int) -> np.ndarray:
        """This epoch's order, drawn at shuffle-stream `offset`; the stream ends just past the draw or
        where it already was, whichever is later (so a resumed draw never rewinds the generator)."""
        if self.weights is None and not self.shuffle:
            return self.indices                 # in order: nothing drawn, the generator is untouched
        gen = self.generator
        before = gen.positions.get("shuffle", 0)
        gen.positions["shuffle"] = offset
        s = gen.stream("shuffle")
        n = self.indices.size
        if self.weights is not None:
            u = s.open_uniform(n)
            cdf = np.cumsum(self.weights)
            pos = np.minimum(np.searchsorted(cdf, u * cdf[-1], side="right"), n - 1)
        else:
            pos = s.permutation(n)
        gen.positions["shuffle"] = max(before, gen.positions["shuffle"])
        return self.indices[pos]

    def _ensure_order(self) -> np.ndarray:
        if self._order is None:
            if self._order_offset is None:
                self._order_offset = self.generator.positions.get("shuffle", 0)
            self._order = self._draw(self._order_offset)
        return self._order

    def _next_epoch(self) -> None:
        self.epoch, self.position = self.epoch + 1, 0
        self._order, self._order_offset = None, None

    # ---- iteration ---------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
        """The remaining batches of the current epoch; afterwards the loader is at the next epoch."""
        if self.position >= self._n_batches:
            self._next_epoch()
        order = self._ensure_order()
        bs, end = self.batch_size, (self._n_batches * self.batch_size if self.drop_last else order.size)
        window = x = y = None
        w_first = w_stop = 0                    # batches [w_first, w_stop) are in the window
        handed = 0                              # bytes of the last batch handed out
        aug = self.generator.stream("augment")
        while self.position < self._n_batches:
            b = self.position
            if self.rows_only:
                self.position = b + 1
                yield order[b * bs:min((b + 1) * bs, end)].copy(), None
                continue
            if window is None or b >= w_stop:
                window = x = y = None           # let go of the old window (the consumer's batch is a copy)
                w_first, w_stop = b, min(b + self.window_batches, self._n_batches)
                idx = order[w_first * bs:min(w_stop * bs, end)]
                window = self.dataset.read(idx)
                wbytes = _nbytes(window)
                self.bytes_read += wbytes
                self.resident_bytes = wbytes + handed
                self.peak_resident_bytes = max(self.peak_resident_bytes, self.resident_bytes)
            lo = (b - w_first) * bs
            x = window[0][lo:lo + bs]
            y = None if window[1] is None else window[1][lo:lo + bs]
            if self.window_batches > 1:         # a view would keep the whole window alive
                x, y = x.copy(), None if y is None else y.copy()
            for t in self.transforms:
                x, y = t(x, y, aug)
            handed = _nbytes((x, y))
            self.position = b + 1
            yield x, y
        self.resident_bytes = 0
        self._next_epoch()

    # ---- exact resume ------------------------------------------------------------------------------
    def _fingerprint(self) -> str:
        h = blake3.blake3(np.ascontiguousarray(self.indices, dtype="<i8").tobytes())
        if self.weights is not None:
            h.update(np.ascontiguousarray(self.weights, dtype="<f8").tobytes())
        return h.hexdigest()[:32]

    def place(self) -> tuple:
        """Where the loader is, cheaply (no fingerprint): for `state_dict(place)` later, once more batches
        have been read (a consumer that reads one batch ahead checkpoints the place before that read)."""
        return self.epoch, self.position, self._order_offset

    def state_dict(self, place: tuple | None = None) -> dict:
        """Where the loader is (or was, at `place()`): epoch, batches done in it, and the shuffle position
        its order came from."""
        epoch, position, offset = place if place is not None else self.place()
        return {"version": STATE_VERSION, "epoch": epoch, "position": position,
                "order_offset": offset, "batch_size": self.batch_size, "shuffle": self.shuffle,
                "drop_last": self.drop_last, "weighted": self.weights is not None, "n": int(self.indices.size),
                "fingerprint": self._fingerprint()}

    def load_state_dict(self, state: dict) -> None:
        """Continue from `state` (load the generator's saved state into this loader's generator too)."""
        try:
            mine = self.state_dict()
            for k in ("version", "batch_size", "shuffle", "drop_last", "weighted", "n", "fingerprint"):
                if state[k] != mine[k]:
                    raise DataError(f"the saved loader state has {k}={state[k]!r}, this loader {mine[k]!r}",
                                    where="Batches.load_state_dict",
                                    hint="resume with the same dataset indices, batch size and options")
            epoch, position, offset = int(state["epoch"]), int(state["position"]), state["order_offset"]
        except (KeyError, TypeError, ValueError) as e:
            raise DataError(f"not a loader state: {type(e).__name__}: {e}", where="Batches.load_state_dict") from None
        if not 0 <= position <= self._n_batches:
            raise DataError(f"position {position} is outside an epoch of {self._n_batches} batches",
                            where="Batches.load_state_dict")
        self.epoch, self.position = epoch, position
        self._order_offset = None if offset is None else int(offset)
        self._order = None


def _nbytes(pair) -> int:
    return int(sum(a.nbytes for a in pair if a is not None))
