"""Data-parallel training: per-slice gradients tree-reduced on workers equal the single-process full-batch
gradient (f32 rounding of per-slice means: rtol 1e-5) and an independent float64 PyTorch gradient (rtol 1e-4);
the run's losses follow a single-device sc.Run of the same spec; the result does not depend on worker count."""
from __future__ import annotations

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.executor import run_numpy
from scellis_jupyter.pool import Pool
from scellis_jupyter.pool.parallel import DataParallel, _grad_step, data_parallel

from fixtures import spec_text

SPEC = spec_text("digits_dp")
STEPS = 6


def _batch(dp):
    return next(iter(dp.batches()))


def _torch_grads(weights: dict, x, y):
    torch = pytest.importorskip("torch")
    t = {k: torch.tensor(np.asarray(v, np.float64), requires_grad=True) for k, v in weights.items()}
    names = sorted(t)
    hid = [n for n in names if n.startswith("hidden")]
    out = [n for n in names if n.startswith("logits")]
    W1 = next(t[n] for n in hid if t[n].ndim == 2)
    B1 = next(t[n] for n in hid if t[n].ndim == 1)
    W2 = next(t[n] for n in out if t[n].ndim == 2)
    B2 = next(t[n] for n in out if t[n].ndim == 1)
    xt = torch.tensor(np.asarray(x, np.float64))

    def lin(a, W, B):                       # our linear stores W as [in, out] or [out, in]: follow the shape
        return a @ W + B if W.shape[0] == a.shape[1] else a @ W.T + B
    z = lin(torch.relu(lin(xt, W1, B1)), W2, B2)
    loss = torch.nn.functional.cross_entropy(z, torch.tensor(np.asarray(y, np.int64)))
    loss.backward()
    return float(loss.detach()), {k: v.grad.numpy() for k, v in t.items()}


def test_reduced_gradient_equals_the_full_batch_gradient(pool):
    dp = DataParallel(pool, SPEC, slices=4, steps=1)
    x, y = _batch(dp)
    red = dp.gradient(x, y).result()
    assert red["n"] == 60 and dp.sizes == [15, 15, 15, 15]
    full = _grad_step(dp.spec, 60, dp.tier)                   # one process, the whole batch
    out = run_numpy(full, {"x": x, "y": y, **dp.init}, sc.device("reference").impl)
    assert red["loss"] == pytest.approx(float(out["loss"]), rel=1e-6)
    for n in full.param_names:
        np.testing.assert_allclose(red["grads"][n], out[f"grad:{n}"], rtol=1e-5, atol=1e-7, err_msg=n)
    loss, tg = _torch_grads(dp.init, x, y)                  # independent: float64 PyTorch on the CPU
    assert red["loss"] == pytest.approx(loss, rel=1e-5)
    assert np.sqrt(sum((g ** 2).sum() for g in tg.values())) > 0.5      # clipping matters in the update
    for n in full.param_names:
        np.testing.assert_allclose(red["grads"][n], tg[n], rtol=1e-4, atol=1e-6, err_msg=n)


def test_uneven_slices_are_weighted_by_their_rows(pool):
    dp = DataParallel(pool, SPEC, slices=7, steps=1)
    assert sorted(set(dp.sizes)) == [8, 9] and sum(dp.sizes) == 60
    x, y = _batch(dp)
    red = dp.gradient(x, y).result()
    full = _grad_step(dp.spec, 60, dp.tier)
    out = run_numpy(full, {"x": x, "y": y, **dp.init}, sc.device("reference").impl)
    for n in full.param_names:
        np.testing.assert_allclose(red["grads"][n], out[f"grad:{n}"], rtol=1e-5, atol=1e-7, err_msg=n)


def test_training_follows_the_single_device_run_and_replicas_agree(pool):
    events = []
    dp = data_parallel(pool, SPEC, slices=4, steps=STEPS, on_step=events.append)
    single = sc.Run(SPEC, device="reference", steps=STEPS)
    single.run_to_end()
    np.testing.assert_allclose(dp.loss_history, single.loss_history, rtol=1e-5)
    w, sw = dp.weights(), single.weights()
    for k in sw:
        np.testing.assert_allclose(w[k], sw[k], rtol=1e-4, atol=1e-6, err_msg=k)
    hashes = dp.replica_hashes()
    assert len(hashes) == 2 and len(set(hashes.values())) == 1          # the update was applied identically
    assert [e["step"] for e in events] == list(range(1, STEPS + 1))
    assert [e["loss"] for e in events] == dp.loss_history


def test_the_run_does_not_depend_on_the_worker_count(pool):
    with Pool(workers=1, processes=False) as one:
        a = DataParallel(one, SPEC, slices=4, steps=3).train()
    b = DataParallel(pool, SPEC, slices=4, steps=3).train()
    assert a == b                                            # bit for bit: the tree's order is the slices'


def test_a_loss_curve_follows_the_shared_run(pool):
    from scellis_jupyter.jupyter.widgets import LossCurve
    dp = DataParallel(pool, SPEC, slices=2, steps=3)
    curve = LossCurve(title="data-parallel")
    curve.follow(dp, key="dp")
    dp.train()
    steps, values, _ = curve.store.arrays()[("dp", "loss")]
    assert list(steps) == [1, 2, 3]
    np.testing.assert_allclose(values, dp.loss_history, rtol=1e-7)


def test_bad_data_parallel_requests_are_refused(pool):
    with pytest.raises(sc.PoolError, match="slices=0"):
        DataParallel(pool, SPEC, slices=0)
    with pytest.raises(sc.PoolError, match="over the 1000 declared per device"):
        DataParallel(pool, SPEC, slices=2, memory=1000)
    with pytest.raises(sc.PoolError, match="gradient accumulation"):
        DataParallel(pool, SPEC.replace("seed = 0", "seed = 0\ngrad_accum_steps = 2"))
    drop = SPEC.replace('{ op = "relu" },', '{ op = "relu" }, { op = "dropout", p = 0.2 },')
    dp = DataParallel(pool, drop, slices=2, steps=1)
    with pytest.raises(sc.PoolError, match="dropout"):
        dp.train()
