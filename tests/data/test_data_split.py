"""Splits: disjoint covering parts, stable content hashes, stratification against scikit-learn.

Sizes: every part of any split is floor or ceil of fraction * n (largest remainder); two-part sizes are
within one of scikit-learn's `train_test_split` (which always rounds the test part up) and equal to it when
the test part's fractional size is above one half. Stratified: each class's count in each part is within one
example of fraction * class size, and within one of scikit-learn's stratified count for that class.
Hashes: equal across two calls, in a fresh Python process (different PYTHONHASHSEED), and for fractions
given in another key order; different for another seed, fractions, stratify flag or dataset.
The permutation is checked to be the Philox `shuffle` stream of Generator(seed).
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from scellis_jupyter.data import ArrayDataset, DataError, Split, load_dataset, split
from scellis_jupyter.rng import Generator

sk_ms = pytest.importorskip("sklearn.model_selection")


def _check_partition(sp, n):
    allidx = np.concatenate(list(sp.parts.values()))
    assert np.array_equal(np.sort(allidx), np.arange(n))
    for k, v in sp.parts.items():
        assert v.dtype == np.int64 and np.all(np.diff(v) > 0)
        assert math.floor(sp.fractions[k] * n) <= v.size <= math.ceil(sp.fractions[k] * n)


@pytest.mark.parametrize("name", ["iris", "wine", "digits"])
def test_parts_partition_and_sizes(name):
    ds = load_dataset(name)
    sp = split(ds)
    _check_partition(sp, len(ds))
    assert list(sp.parts) == ["train", "val", "test"]
    for test_size in (0.2, 0.25, 0.33):
        two = split(ds, {"train": 1 - test_size, "test": test_size}, seed=1)
        tr, te = sk_ms.train_test_split(np.arange(len(ds)), test_size=test_size, random_state=0)
        # scikit-learn always rounds the test part up; largest remainder may round either part up
        assert abs(two["test"].size - te.size) <= 1 and two["train"].size + two["test"].size == len(ds)
        if (test_size * len(ds)) % 1 > 0.5:
            assert two["test"].size == te.size


def test_uses_philox_shuffle_stream():
    ds = load_dataset("wine")
    sp = split(ds, {"a": 0.5, "b": 0.5}, seed=11)
    perm = Generator(11).stream("shuffle").permutation(len(ds))
    np.testing.assert_array_equal(sp["a"], np.sort(perm[:89]))
    np.testing.assert_array_equal(sp["b"], np.sort(perm[89:]))


@pytest.mark.parametrize("name,fractions", [("iris", {"train": 0.8, "test": 0.2}),
                                            ("wine", {"train": 0.7, "test": 0.3}),
                                            ("digits", {"train": 0.75, "test": 0.25}),
                                            ("breast_cancer", {"train": 0.9, "test": 0.1})])
def test_stratified_counts_match_sklearn(name, fractions):
    ds = load_dataset(name)
    y = ds.targets()
    sp = split(ds, fractions, seed=3, stratify=True)
    _check_partition(sp, len(ds))
    tr, te = sk_ms.train_test_split(np.arange(len(ds)), test_size=fractions["test"], stratify=y, random_state=0)
    assert abs(sp["test"].size - te.size) <= 1
    for part, ref in (("train", tr), ("test", te)):
        ours, theirs = np.bincount(y[sp[part]], minlength=ds.n_classes), np.bincount(y[ref], minlength=ds.n_classes)
        assert np.all(np.abs(ours - theirs) <= 1), (part, ours, theirs)


def test_stratified_three_parts_within_one_per_class():
    rng = np.random.default_rng(5)
    y = rng.choice(4, size=503, p=[0.55, 0.25, 0.15, 0.05]).astype(np.int32)
    ds = ArrayDataset(rng.standard_normal((503, 2)).astype(np.float32), y)
    fr = {"train": 0.6, "val": 0.25, "test": 0.15}
    sp = split(ds, fr, seed=0, stratify=True)
    _check_partition(sp, 503)
    sizes = np.bincount(y)
    for k, f in fr.items():
        counts = np.bincount(y[sp[k]], minlength=4)
        assert np.all(np.abs(counts - f * sizes) < 1 + 1e-9), (k, counts, f * sizes)


def test_hash_stable_and_sensitive():
    ds = load_dataset("iris")
    a = split(ds, {"train": 0.8, "val": 0.1, "test": 0.1}, seed=0)
    b = split(load_dataset("iris"), {"test": 0.1, "train": 0.8, "val": 0.1}, seed=0)
    assert a.hash == b.hash and all(np.array_equal(a[k], b[k]) for k in a.parts)
    assert len(a.hash) == 64
    others = [split(ds, seed=1), split(ds, {"train": 0.7, "val": 0.2, "test": 0.1}),
              split(ds, stratify=True), split(load_dataset("wine"))]
    assert len({a.hash} | {o.hash for o in others}) == 5


def test_hash_is_process_independent(run_python):
    here = split(load_dataset("digits"), {"train": 0.6, "test": 0.4}, seed=9, stratify=True)
    code = ("from scellis_jupyter.data import load_dataset, split\n"
            "print(split(load_dataset('digits'), {'test': 0.4, 'train': 0.6}, seed=9, stratify=True).hash)")
    for hashseed in ("1", "12345"):
        r = run_python(code, PYTHONHASHSEED=hashseed)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == here.hash


def test_to_dict_from_dict_round_trip_and_tamper():
    sp = split(load_dataset("wine"), seed=4, stratify=True)
    d = json.loads(json.dumps(sp.to_dict()))
    back = Split.from_dict(d)
    assert back.hash == sp.hash and back.stratify and back.seed == 4
    assert all(np.array_equal(back[k], sp[k]) for k in sp.parts)
    d["parts"]["val"][0], d["parts"]["test"][0] = d["parts"]["test"][0], d["parts"]["val"][0]
    with pytest.raises(DataError, match="do not match its hash"):
        Split.from_dict(d)
    with pytest.raises(DataError, match="not a split record"):
        Split.from_dict({"version": 1})
    with pytest.raises(DataError, match="did you mean 'train'"):
        sp["trian"]


def test_bad_requests():
    ds = load_dataset("iris")
    with pytest.raises(DataError, match="sum to 0.9"):
        split(ds, {"train": 0.8, "test": 0.1})
    with pytest.raises(DataError, match="in \\[0, 1\\]"):
        split(ds, {"train": 1.2, "test": -0.2})
    with pytest.raises(DataError, match="non-empty"):
        split(ds, {})
    with pytest.raises(DataError, match="cannot stratify"):
        split(load_dataset("synthetic_regression", {"n_rows": 20}), stratify=True)
    with pytest.raises(DataError, match="takes a Dataset"):
        split(np.zeros(3))


def test_stratified_table_is_a_controlled_rounding():
    """Random class sizes and fractions: rows exact, columns = largest remainder, cells within one."""
    from scellis_jupyter.data.split import largest_remainder, stratified_counts
    rng = np.random.default_rng(0)
    for _ in range(400):
        sizes = rng.integers(0, 40, rng.integers(1, 8))
        f = rng.dirichlet(np.ones(rng.integers(1, 6)))
        if sizes.sum() == 0:
            continue
        t = stratified_counts(sizes, list(f))
        assert np.array_equal(t.sum(1), sizes)
        assert np.array_equal(t.sum(0), largest_remainder(int(sizes.sum()), list(f)))
        assert np.all(np.abs(t - np.outer(sizes, f)) < 1 + 1e-9) and np.all(t >= 0)
