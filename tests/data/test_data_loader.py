"""Batches: coverage per epoch, Philox order, exact resume, weighted sampling, memory budget, augmentation.

Order: each epoch is indices[Generator(seed).stream("shuffle").permutation(n)] drawn at consecutive
stream positions (checked against the stream directly). Resume: the batches after restoring a JSON
round-tripped generator + loader state into fresh objects are bit-identical to the uninterrupted run,
for several cut points, with and without a memory budget, with augmentation. Weighted sampling: over
20 000 draws the chi-square statistic of the group counts against the weights is below the 0.999
quantile (so a correct sampler fails about once in a thousand seeds; the seed is fixed), zero weight is
never drawn. Streaming: a 40 MiB memory-mapped NPY trains one epoch under a 4 MiB budget with
`peak_resident_bytes` <= 4 MiB, every row read exactly once, and the row contents correct.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from scellis_jupyter.data import ArrayDataset, Batches, DataError, load_dataset
from scellis_jupyter.rng import Generator


def _ds(n=103, d=3):
    x = np.arange(n * d, dtype=np.float32).reshape(n, d)
    return ArrayDataset(x, (np.arange(n) % 7).astype(np.int32))


def _rows(batches):
    """The dataset row of every example in a list of (x, y) batches (x[:, 0] / 3 for _ds)."""
    return np.concatenate([(x[:, 0] // 3).astype(np.int64) for x, _ in batches])


def test_every_index_once_per_epoch_in_philox_order():
    ds = _ds()
    idx = np.arange(5, 103, 2)                 # a part of the dataset, as a split gives
    gen = Generator(4)
    b = Batches(ds, idx, 8, gen)
    assert len(b) == 7
    ref = Generator(4).stream("shuffle")
    seen = []
    for epoch in range(3):
        batches = list(b)
        assert [len(x) for x, _ in batches] == [8] * 6 + [1]
        rows = _rows(batches)
        assert np.array_equal(np.sort(rows), idx)
        np.testing.assert_array_equal(rows, idx[ref.permutation(idx.size)])
        for x, y in batches:
            np.testing.assert_array_equal(y, (x[:, 0] // 3).astype(np.int32) % 7)
        seen.append(rows)
        assert b.epoch == epoch + 1
    assert not np.array_equal(seen[0], seen[1])


def test_no_shuffle_and_drop_last():
    ds = _ds()
    gen = Generator(0)
    b = Batches(ds, None, 10, gen, shuffle=False, drop_last=True)
    batches = list(b)
    assert len(b) == len(batches) == 10 and all(len(x) == 10 for x, _ in batches)
    np.testing.assert_array_equal(_rows(batches), np.arange(100))
    assert gen.state_dict()["positions"] == {}            # nothing drawn for an ordered pass


def _run(loader, n_batches):
    out = []
    it = iter(loader)
    while len(out) < n_batches:
        try:
            out.append(next(it))
        except StopIteration:
            it = iter(loader)
    return out


def _flip(x, y, stream):
    """An augmentation: negate each example with probability 1/2, from the augment stream."""
    u = stream.uniform((x.shape[0],))
    return np.where((u < 0.5)[:, None], -x, x), y


@pytest.mark.parametrize("budget", [None, 6 * 8 * 16])
@pytest.mark.parametrize("cut", [1, 5, 13, 14, 20])
def test_exact_resume(cut, budget):
    ds = _ds()                                           # 16 bytes per example, 13 batches per epoch
    total = 34
    gfull = Generator(7)
    full = _run(Batches(ds, None, 8, gfull, memory_budget=budget, transforms=[_flip]), total)
    gen = Generator(7)
    a = Batches(ds, None, 8, gen, memory_budget=budget, transforms=[_flip])
    first = _run(a, cut)
    saved = json.loads(json.dumps({"gen": gen.state_dict(), "loader": a.state_dict()}))
    gen2 = Generator.from_state(saved["gen"])
    b = Batches(ds, None, 8, gen2, memory_budget=budget, transforms=[_flip])
    b.load_state_dict(saved["loader"])
    rest = _run(b, total - cut)
    assert len(first + rest) == total
    for (x1, y1), (x2, y2) in zip(full, first + rest):
        np.testing.assert_array_equal(x1, x2)
        np.testing.assert_array_equal(y1, y2)
    assert gen2.state_dict() == gfull.state_dict()      # every stream ends where the uninterrupted run's did
    assert any(np.any(x < 0) for x, _ in rest) and any(np.any(x > 0) for x, _ in rest)


def test_state_mismatch_is_refused():
    ds = _ds()
    a = Batches(ds, None, 8, Generator(0))
    next(iter(a))
    with pytest.raises(DataError, match="batch_size"):
        Batches(ds, None, 16, Generator(0)).load_state_dict(a.state_dict())
    with pytest.raises(DataError, match="fingerprint"):
        Batches(ds, np.arange(1, 104) % 103, 8, Generator(0)).load_state_dict(a.state_dict())
    with pytest.raises(DataError, match="not a loader state"):
        Batches(ds, None, 8, Generator(0)).load_state_dict({"version": 1})


def test_weighted_sampling_frequencies():
    scipy_stats = pytest.importorskip("scipy.stats")
    n = 1000
    ds = _ds(n, 3)
    group = np.arange(n) % 4                            # weight 0, 1, 2, 3 by group
    b = Batches(ds, None, 100, Generator(2), weights=group.astype(np.float64))
    rows = np.concatenate([_rows(list(b)) for _ in range(20)])
    assert rows.size == 20 * n
    counts = np.bincount(group[rows], minlength=4)
    assert counts[0] == 0
    expected = rows.size * np.array([1, 2, 3]) / 6
    chi2 = float(((counts[1:] - expected) ** 2 / expected).sum())
    assert chi2 < scipy_stats.chi2.ppf(0.999, df=2), (counts, expected)
    # with replacement: some row repeats within an epoch (P(no repeat) is astronomically small)
    first = rows[:n]
    assert np.unique(first).size < n
    b2 = Batches(ds, None, 100, Generator(2), weights=group.astype(np.float64))
    np.testing.assert_array_equal(_rows(list(b2)), first)  # same seed, same draws


def test_bad_arguments():
    ds = _ds()
    with pytest.raises(DataError, match="weights"):
        Batches(ds, None, 4, Generator(0), weights=np.ones(5))
    with pytest.raises(DataError, match="not all zero"):
        Batches(ds, None, 4, Generator(0), weights=np.zeros(103))
    with pytest.raises(DataError) as e:
        Batches(ds, None, 8, Generator(0), memory_budget=200)
    assert "batch_size <= 6" in e.value.diagnostic.hint
    with pytest.raises(DataError, match="batch_size"):
        Batches(ds, None, 0, Generator(0))
    with pytest.raises(DataError, match="out of range"):
        Batches(ds, [0, 103], 4, Generator(0))


def test_streams_a_40mb_npy_under_a_4mb_budget(tmp_path):
    rows, cols = 10240, 1024                             # 40 MiB of float32 features
    path = tmp_path / "big.npy"
    mm = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(rows, cols))
    for i in range(0, rows, 512):                        # row r holds the value r (exact in f32)
        mm[i:i + 512] = np.arange(i, i + 512, dtype=np.float32)[:, None]
    mm.flush()
    del mm
    np.save(tmp_path / "labels.npy", (np.arange(rows) % 10).astype(np.int64))
    ds = load_dataset(str(path), {"target": "labels.npy"})
    assert isinstance(ds._x, np.memmap) and ds.nbytes >= 40 * 2 ** 20
    budget = 4 * 2 ** 20
    b = Batches(ds, None, 256, Generator(0), memory_budget=budget)
    seen = np.zeros(rows, np.int64)
    for x, y in b:
        r = x[:, 0].astype(np.int64)
        assert np.all(x == x[:, :1]) and np.array_equal(y, r % 10)
        seen[r] += 1
    assert np.all(seen == 1)
    assert 0 < b.peak_resident_bytes <= budget < ds.nbytes
    assert b.bytes_read == ds.nbytes                     # each example read once, never the file at once
    assert b.window_batches >= 1 and b.window_batches * b.batch_nbytes < budget


def test_rows_only_yields_the_row_ids_of_the_same_order_and_resumes():
    ds = _ds()
    read = list(Batches(ds, None, 8, Generator(3)))
    rows = list(Batches(ds, None, 8, Generator(3), rows_only=True))
    assert [y for _, y in rows] == [None] * len(rows)
    np.testing.assert_array_equal(np.concatenate([r for r, _ in rows]), _rows(read))
    gen = Generator(3)
    a = Batches(ds, None, 8, gen, rows_only=True)
    it = iter(a)
    first = [next(it)[0] for _ in range(5)]
    st = json.loads(json.dumps({"g": gen.state_dict(), "l": a.state_dict()}))
    b = Batches(ds, None, 8, Generator.from_state(st["g"]), rows_only=True)
    b.load_state_dict(st["l"])
    np.testing.assert_array_equal(np.concatenate(first + [r for r, _ in b]), _rows(read))
    with pytest.raises(DataError, match="no transforms or memory budget"):
        Batches(ds, None, 8, Generator(0), rows_only=True, transforms=[_flip])
