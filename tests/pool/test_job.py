"""Jobs are content-addressed; partitioners and reductions are catalog entries."""
from __future__ import annotations

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter import catalog
from scellis_jupyter.pool import Job, content_hash


def double(x, k=2):
    return x * k


def triple(x, k=2):
    return x * 3


def test_hash_names_program_inputs_and_parameters():
    base = Job(double, inputs={"items": [1, 2, 3]}, params={"k": 2})
    assert base.hash == Job(double, inputs={"items": [1, 2, 3]}, params={"k": 2}).hash
    others = [Job(triple, inputs={"items": [1, 2, 3]}, params={"k": 2}),
              Job(double, inputs={"items": [1, 2, 4]}, params={"k": 2}),
              Job(double, inputs={"items": [1, 2, 3]}, params={"k": 3}),
              Job(double, inputs={"items": [1, 2, 3]}, params={"k": 2}, verify="reference")]
    assert len({base.hash} | {j.hash for j in others}) == 5


def test_array_hash_covers_bytes_dtype_and_shape():
    a = np.arange(6, dtype=np.float32)
    assert content_hash(a) == content_hash(a.copy())
    assert content_hash(a) != content_hash(a.astype(np.float64))
    assert content_hash(a) != content_hash(a.reshape(2, 3))
    b = a.copy(); b[3] += 1e-6
    assert content_hash(a) != content_hash(b)


def test_shards_are_content_addressed_and_cut_by_the_catalog():
    job = Job(double, inputs={"items": list(range(7))}, partition={"chunk": 3})
    shards = job.shards()
    assert [s.payload for s in shards] == [[0, 1, 2], [3, 4, 5], [6]]
    assert len({s.hash for s in shards}) == 3 and all(s.job == job.hash for s in shards)
    names = {e["name"] for e in catalog.list_entries("partitioner")}
    assert {"items", "kfold", "row_blocks"} <= names
    assert {"collect", "mean", "concat_rows"} <= {e["name"] for e in catalog.list_entries("reducer")}
    assert all(e["origin"].endswith(".py") for e in catalog.list_entries("reducer"))


def test_kfold_folds_are_disjoint_and_cover_every_row():
    folds = catalog.make("partitioner", "kfold", k=4, seed=1)({"n": 23})
    vals = np.concatenate([f["val"] for f in folds])
    assert sorted(vals.tolist()) == list(range(23))
    for f in folds:
        assert not set(f["val"]) & set(f["train"]) and len(f["val"]) + len(f["train"]) == 23


def test_bad_declarations_are_refused():
    with pytest.raises(sc.CatalogError, match="partitioner"):
        Job(double, partitioner="itemz")
    with pytest.raises(sc.CatalogError):
        Job(double, reduction="sum_of_nothing")
    with pytest.raises(sc.PoolError, match="verification method"):
        Job(double, verify="trust-me")
    with pytest.raises(sc.PoolError, match="no shards"):
        Job(double, inputs={"items": []}).shards()
