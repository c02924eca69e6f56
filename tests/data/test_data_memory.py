"""In-memory data (arrays and DataFrames from a notebook): explicit parts, standardize, hashes, diagnostics.

References: scikit-learn's StandardScaler (fitted on the training rows only) for the statistics, and a numpy
forward pass of the trained weights for `Run.predict` applying them.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_iris
from sklearn.preprocessing import StandardScaler

import scellis_jupyter as sc
from scellis_jupyter.data.memory import MemoryData, fit_standardizer

SPEC = """
[data]
train = "X_tr, y_tr"
val = "X_va, y_va"
test = "X_te, y_te"
standardize = true
[model]
nodes = [{ name = "out", op = "linear", out = 3 }]
[recipe]
batch_size = 16
steps = 12
metrics = ["accuracy"]
optimizer = { name = "adam", lr = 0.05 }
"""


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    p = np.random.default_rng(0).permutation(len(X))
    X, y = (X[p] * [1, 10, 100, 1000]).astype(np.float32), y[p].astype(np.int64)
    return dict(X_tr=X[:100], y_tr=y[:100], X_va=X[100:125], y_va=y[100:125], X_te=X[125:], y_te=y[125:])


def test_explicit_parts_are_the_split_and_standardize_fits_train_rows_only(iris, tmp_path):
    spec = sc.Spec.from_text(SPEC, namespace=iris)
    run = sc.Run(spec, device="reference", store=tmp_path)
    assert run.split.sizes() == {"train": 100, "val": 25, "test": 25}
    xs, ys = run.dataset.base.read(run.split["val"])
    np.testing.assert_array_equal(xs, iris["X_va"])
    np.testing.assert_array_equal(ys, iris["y_va"])
    ref = StandardScaler().fit(iris["X_tr"].astype(np.float64))
    np.testing.assert_allclose(run.standardizer["mean"], ref.mean_, rtol=1e-12)
    np.testing.assert_allclose(run.standardizer["std"], ref.scale_, rtol=1e-12)
    rec = sc.runs(tmp_path)[-1]
    assert rec.extra["standardize"] == run.standardizer
    assert rec.extra["memory_data"]["parts"]["train"]["names"] == "X_tr, y_tr"
    x, _ = run.dataset.read(np.arange(3))
    np.testing.assert_allclose(x, ref.transform(iris["X_tr"][:3]), rtol=1e-5, atol=1e-6)


def test_chunked_standardizer_matches_one_pass():
    rng = np.random.default_rng(1)
    x = (rng.normal(size=(3000, 5)) * 1e3 + 1e6).astype(np.float32)
    from scellis_jupyter.data import ArrayDataset
    ds = ArrayDataset(x, None)
    import scellis_jupyter.data.memory as m
    rows = np.arange(0, 3000, 2)
    got = fit_standardizer(ds, rows)
    ref = StandardScaler().fit(x[rows].astype(np.float64))
    np.testing.assert_allclose(got["mean"], ref.mean_, rtol=1e-12)
    np.testing.assert_allclose(got["std"], ref.scale_, rtol=1e-9)
    assert m is not None


def test_predict_applies_the_training_statistics(iris, tmp_path):
    run = sc.train(SPEC, data={"train": (iris["X_tr"], iris["y_tr"]), "val": (iris["X_va"], iris["y_va"])},
                   store=tmp_path, progress=False, device="reference")
    w = run.weights()
    mean, std = np.asarray(run.standardizer["mean"]), np.asarray(run.standardizer["std"])
    z = (iris["X_te"].astype(np.float64) - mean) / std
    want = z @ w["out.weight"].astype(np.float64).T + w["out.bias"]
    np.testing.assert_allclose(run.predict(iris["X_te"]), want, rtol=1e-4, atol=1e-4)
    ev = run.evaluate("val")
    assert 0.0 <= ev["accuracy"] <= 1.0 and ev["loss"] > 0


def test_python_data_and_notebook_names_train_the_same_run(iris, tmp_path):
    a = sc.train(sc.Spec.from_text(SPEC, namespace=iris), store=tmp_path, progress=False, device="reference")
    b = sc.train(SPEC, data={k: (iris[f"X_{k[:2]}"], iris[f"y_{k[:2]}"]) for k in ("train", "val", "test")},
                 store=tmp_path, progress=False, device="reference")
    assert a.weights_hash() == b.weights_hash()
    assert sc.runs(tmp_path)[0].dataset_hash == sc.runs(tmp_path)[1].dataset_hash


def test_content_hash_tells_one_changed_value():
    x, y = np.ones((10, 3), np.float32), np.zeros(10, np.int64)
    a = MemoryData.from_parts({"train": (x, y)}).content_hash()
    x2 = x.copy()
    x2[7, 1] = 1.0000001
    assert MemoryData.from_parts({"train": (x2, y)}).content_hash() != a
    assert MemoryData.from_parts({"train": (x.copy(), y.copy())}).content_hash() == a


def test_dataframe_with_text_labels(tmp_path):
    rng = np.random.default_rng(2)
    df = pd.DataFrame({"a": rng.normal(size=80), "b": rng.normal(size=80)})
    df["label"] = np.where(df["a"] + df["b"] > 0, "pos", "neg")
    text = """
[data]
train = "df"
target = "label"
split = { train = 0.75, test = 0.25 }
[model]
nodes = [{ op = "linear", out = 2 }]
[recipe]
batch_size = 8
steps = 5
"""
    spec = sc.Spec.from_text(text, namespace={"df": df})
    assert spec.dataset.n_classes == 2 and spec.input["shape"] == (2,)
    run = sc.train(spec, store=tmp_path, progress=False, device="reference")
    assert run.split.sizes() == {"train": 60, "test": 20}
    assert run.dataset.read(np.arange(80))[1].tolist() == (df["label"] == "pos").astype(int).tolist()
    assert run.predict(df.head(4)).shape == (4, 2)          # the target column is dropped
    v = sc.verify(run.run_id, store=tmp_path)               # the stored arrays rebuild the same data
    assert v.ok, v.lines()


@pytest.mark.parametrize("ns, text_sub, want", [
    ({"X_tr": None}, None, "'X_va' is not defined in the notebook"),
    ("frame-no-target", None, "has no column 'label'"),
    ("shape", None, "takes examples of shape [5]"),
    ("rows", None, "train (X_tr, y_tr) features have 100 rows but its labels have 99"),
])
def test_bad_input_is_a_diagnostic_at_the_data_line(iris, ns, text_sub, want):
    text, kind = SPEC, ns if isinstance(ns, str) else "missing"
    if ns == "frame-no-target":
        df = pd.DataFrame({"a": [1.0, 2.0], "lbl": [0, 1]})
        text = '[data]\ntrain = "df"\ntarget = "label"\n[model]\nnodes = [{ op = "linear", out = 2 }]\n'
        ns = {"df": df}
    elif ns == "shape":
        text = SPEC.replace('[model]\n', '[model]\ninput = { shape = [5] }\n')
        ns = iris
    elif ns == "rows":
        ns = dict(iris, y_tr=iris["y_tr"][:99])
    else:
        ns = {k: v for k, v in iris.items() if k != "X_va"}
    with pytest.raises(sc.SpecError) as e:
        sc.Spec.from_text(text, source="cell", namespace=ns)
    d = e.value.diagnostic
    assert want in d.message, d.format()
    line = int(d.where.split(":")[1])
    assert text.split("\n")[line - 1].split("=")[0].strip() in ("train", "val", "target", "input", "[data]") \
        or "input" in text.split("\n")[line - 1], (d.where, text.split("\n")[line - 1])
    if kind == "frame-no-target":
        assert "lbl" in d.hint


def test_frame_missing_target_hint_names_the_close_column():
    df = pd.DataFrame({"a": [1.0, 2.0], "labels": [0, 1]})
    with pytest.raises(sc.ScellisError) as e:
        MemoryData.from_parts({"train": df}, target="label")
    assert "did you mean 'labels'" in e.value.diagnostic.hint


def test_frame_missing_target_hint_leads_with_the_label_column_and_marks_a_cut_list():
    """wine as a DataFrame (13 float features, then "target"), asked for "label": nothing is close by spelling,
    so the hint names the column that looks like labels, and a list it cuts says so."""
    from sklearn.datasets import load_digits, load_wine
    wine = load_wine(as_frame=True).frame
    with pytest.raises(sc.ScellisError) as e:
        MemoryData.from_parts({"train": wine}, target="label")
    hint = e.value.diagnostic.hint
    assert "'target'" in hint.split(";")[0], hint
    assert "14 columns" in hint and all(c in hint for c in wine.columns), hint       # 14: all of them
    digits = load_digits(as_frame=True).frame                                        # 64 pixels, then "target"
    with pytest.raises(sc.ScellisError) as e:
        MemoryData.from_parts({"train": digits}, target="label")
    hint = e.value.diagnostic.hint
    assert "'target'" in hint.split(";")[0] and "65 columns" in hint, hint
    assert "..." in hint and "pixel_7_7" not in hint.split(";")[1], hint         # cut, and said to be


def test_names_without_a_namespace_say_how_to_pass_data():
    with pytest.raises(sc.SpecError) as e:
        sc.Spec.from_text(SPEC)
    assert "namespace" in e.value.diagnostic.hint and e.value.diagnostic.where == "<spec>:3:9"


def test_resume_from_the_store_alone_uses_the_kept_arrays(iris, tmp_path):
    """A notebook run resumed by the CLI (no kernel): the arrays come back from the store, bit for bit."""
    data = {"train": (iris["X_tr"], iris["y_tr"]), "val": (iris["X_va"], iris["y_va"])}
    full = sc.train(SPEC, data=data, store=tmp_path / "a", progress=False, device="reference", steps=12)
    run = sc.Run(sc.Spec.from_text(SPEC, data=data), store=tmp_path / "b", device="reference", steps=12)
    for s in run:
        if s.step == 5:
            run.interrupt("test")
            break
    again = sc.resume(run.run_id, store=tmp_path / "b", progress=False)
    assert again.step == 12 and again.weights_hash() == full.weights_hash()
    assert again.standardizer == full.standardizer
