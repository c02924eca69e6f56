"""Batch analysis: a trained run's outputs over a dataset cut into row blocks on a Pool, stacked in order,
equal the run's own predict (atol 2e-5: BLAS sums a 250-row block in another order than 1797 rows, in f32) and an
independent float64 PyTorch forward of its weights (rtol 1e-4)."""
from __future__ import annotations

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.pool import Pool
from scellis_jupyter.pool.batch import batch_predict, predict_job

SPEC = """
name = "digits-batch"
[data]
dataset = "digits"
standardize = true
[model]
nodes = [{ name = "hidden", op = "linear", out = 24 }, { op = "tanh" }, { name = "logits", op = "linear", out = 10 }]
[recipe]
optimizer = { name = "adam", lr = 1e-2 }
batch_size = 32
determinism = "debug"
"""


@pytest.fixture(scope="module")
def trained():
    run = sc.Run(SPEC, device="reference", steps=10)
    run.run_to_end()
    return run


def test_blocks_come_back_in_order_and_match_the_run(trained):
    from sklearn.datasets import load_digits
    x = load_digits().data.astype(np.float32)
    with Pool(workers=2, processes=False) as p:
        r = batch_predict(p, trained, x, rows=250)
    assert r.value.shape == (len(x), 10) and len(r.value) == 1797
    np.testing.assert_allclose(r.value, trained.predict(x), rtol=1e-5, atol=2e-5)
    torch = pytest.importorskip("torch")
    w = {k: torch.tensor(np.asarray(v, np.float64)) for k, v in trained.weights().items()}
    xs = torch.tensor(np.asarray(trained.dataset.transform(x), np.float64))

    def lin(a, prefix):
        W = next(v for k, v in w.items() if k.startswith(prefix) and v.ndim == 2)
        B = next(v for k, v in w.items() if k.startswith(prefix) and v.ndim == 1)
        return a @ W + B if W.shape[0] == a.shape[1] else a @ W.T + B
    ref = lin(torch.tanh(lin(xs, "hidden")), "logits").numpy()
    np.testing.assert_allclose(r.value, ref, rtol=1e-4, atol=1e-5)


def test_rows_of_the_wrong_shape_are_refused(trained):
    with pytest.raises(sc.PoolError, match="input"):
        predict_job(trained.spec, trained.weights(), np.zeros((4, 7)))


def test_batch_evaluate_matches_scikit_learn(trained):
    from sklearn.datasets import load_digits
    from sklearn.metrics import accuracy_score
    from scellis_jupyter.pool.batch import batch_evaluate
    x, y = load_digits(return_X_y=True)
    with Pool(workers=2, processes=False) as p:
        got = batch_evaluate(p, trained, x, y, metrics=["accuracy"], rows=400)
        with pytest.raises(sc.PoolError, match="labels"):
            batch_evaluate(p, trained, x, y[:5])
    pred = trained.predict(x).argmax(1)
    assert got["rows"] == len(y)
    assert got["accuracy"] == pytest.approx(accuracy_score(y, pred), abs=1e-12)
    assert 0.3 < got["accuracy"] < 1.0                      # 10 steps of training: better than chance
