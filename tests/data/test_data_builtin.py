"""Built-in datasets against scikit-learn's arrays, `dataset_info`, CPython's pydoc text and the formulas.

Tabular sets: exact equality with scikit-learn's arrays cast to float32 (digits / 16 computed in float64,
then rounded). pydoc windows: exact string equality with slices of `pydoc_text()`. Synthetic sets: the
least-squares residual of the regression target has std within 10% of `noise` and its fitted weights are
within 0.05 of the true ones (n=4000); class means of the blobs lie within 5 standard errors of the
class centers. Metadata: every field of `Dataset.info()` equals `dataset_info` for the same table.
"""
from __future__ import annotations

import numpy as np
import pytest

from scellis_jupyter.data import DataError, load_dataset, synthetic_classification, synthetic_regression
from scellis_jupyter.rng import Generator
from scellis_jupyter.data.info import dataset_info, pydoc_text, pydoc_vocab

sklearn_datasets = pytest.importorskip("sklearn.datasets")

SK = {"digits": sklearn_datasets.load_digits, "iris": sklearn_datasets.load_iris,
      "wine": sklearn_datasets.load_wine, "breast_cancer": sklearn_datasets.load_breast_cancer}


@pytest.mark.parametrize("name", sorted(SK))
def test_tabular_matches_sklearn(name):
    ds = load_dataset(name)
    ref = SK[name]()
    x, y = ds.read(np.arange(len(ds)))
    want = ref.data / 16.0 if name == "digits" else ref.data
    assert x.dtype == np.float32 and y.dtype == np.int32
    np.testing.assert_array_equal(x, want.astype(np.float32))
    np.testing.assert_array_equal(y, ref.target)
    if name == "digits":
        assert 0.0 <= x.min() and x.max() == 1.0
    assert ds.info() == dataset_info(name)
    assert ds.n_classes == len(np.unique(ref.target))


def test_read_order_and_subset():
    ds = load_dataset("iris")
    ref = sklearn_datasets.load_iris()
    idx = [149, 0, 77, 77, 3]
    x, y = ds.read(idx)
    np.testing.assert_array_equal(x, ref.data[idx].astype(np.float32))
    np.testing.assert_array_equal(y, ref.target[idx])
    assert ds.nbytes == 150 * (4 * 4 + 4) and ds.example_nbytes == 20
    with pytest.raises(DataError, match="out of range"):
        ds.read([150])


@pytest.mark.parametrize("seq_len", [1, 64, 128, 1000])
def test_pydoc_windows_decode_to_text(seq_len):
    table = {"seq_len": seq_len}
    ds = load_dataset("pydoc_topics", table)
    text, vocab = pydoc_text(), pydoc_vocab()
    assert ds.info() == dataset_info("pydoc_topics", table)
    assert ds.n_classes == len(vocab) and ds.shapes == {"x": (seq_len,), "y": (seq_len,)}
    n = len(ds)
    for i in sorted({0, 1, n // 2, n - 1}):
        x, y = ds.read([i])
        start = i * seq_len
        assert "".join(vocab[t] for t in x[0]) == text[start:start + seq_len]
        assert "".join(vocab[t] for t in y[0]) == text[start + 1:start + seq_len + 1]
        assert x.dtype == np.int32 and y.dtype == np.int32
    if seq_len >= 64:   # the windows tile the text: every input character exactly once, in order
        x, _ = ds.read(np.arange(n))
        assert ds.decode(x) == text[:n * seq_len]


def test_pydoc_default_seq_len_and_bad_value():
    assert load_dataset("pydoc_topics").info() == dataset_info("pydoc_topics")
    with pytest.raises(DataError, match="seq_len"):
        load_dataset("pydoc_topics", {"seq_len": 0})


def test_synthetic_metadata_agrees_with_dataset_info():
    for name, table in [("synthetic_classification", {"n_rows": 50, "n_features": 3, "n_classes": 4}),
                        ("synthetic_classification", {}), ("synthetic_regression", {"n_features": 7}),
                        ("synthetic_regression", {})]:
        ds = load_dataset(name, table)
        assert ds.info() == dataset_info(name, table), (name, table)
        _, y = ds.read(np.arange(len(ds)))
        if name == "synthetic_classification":
            assert set(np.unique(y)) == set(range(ds.n_classes))


def test_synthetic_is_seeded_philox():
    a = synthetic_classification(200, 5, 3, 0.5, seed=7)
    b = load_dataset("synthetic_classification", {"n_rows": 200, "n_features": 5, "n_classes": 3,
                                                  "noise": 0.5, "seed": 7})
    c = synthetic_classification(200, 5, 3, 0.5, seed=8)
    assert a.content_hash() == b.content_hash() != c.content_hash()
    np.testing.assert_array_equal(a.x, b.x)
    # drawn from the "data" stream of Generator(seed): the first draw is the centers
    centers = 2.0 * Generator(7).stream("data").normal((3, 5)).astype(np.float64)
    for k in range(3):
        xs = a.x[a.y == k].astype(np.float64)
        se = 0.5 / np.sqrt(len(xs))
        assert np.all(np.abs(xs.mean(0) - centers[k]) < 5 * se)
        assert abs(xs.std(0, ddof=1).mean() - 0.5) < 0.1
    assert np.bincount(a.y).max() - np.bincount(a.y).min() <= 1      # balanced classes


def test_synthetic_regression_is_linear_plus_noise():
    noise = 0.3
    ds = synthetic_regression(4000, 6, noise, seed=3)
    x, y = ds.x.astype(np.float64), ds.y.astype(np.float64)
    w_true = Generator(3).stream("data").normal((6,)).astype(np.float64)
    w, *_ = np.linalg.lstsq(x, y, rcond=None)
    assert np.max(np.abs(w - w_true)) < 0.05
    assert abs((y - x @ w).std() - noise) < 0.1 * noise
    assert ds.task == "regression" and ds.y_dtype == "f32" and ds.n_classes is None


def test_bad_names_and_parameters():
    with pytest.raises(DataError) as e:
        load_dataset("irs")
    assert "did you mean 'iris'" in str(e.value) and e.value.diagnostic.code == "data"
    with pytest.raises(DataError, match="n_classes"):
        load_dataset("synthetic_classification", {"n_classes": 1})
    with pytest.raises(DataError, match="noise"):
        load_dataset("synthetic_regression", {"noise": -1.0})
    with pytest.raises(DataError, match="no dataset named"):
        load_dataset(None, {})
    assert load_dataset(None, {"dataset": "wine"}).info() == dataset_info("wine")
