"""Pool workers bound to wgpu devices (here: two workers sharing Mesa's llvmpipe adapter, "wgpu:0" and
"wgpu:1" cycling onto it). Data-parallel training on the devices follows the single-device wgpu run of the
same spec (tier prod: per-slice means reduced in float64 against one full-batch mean in f32, rtol 1e-5 on
the loss, rtol 1e-4 / atol 1e-6 on the weights), the reference run (rtol 1e-4), and an independent float64
PyTorch gradient of the first step; sharded optimizer state and the layer relay over two device workers are
green where one device is red and match the single-device wgpu run (rtol 1e-5)."""
from __future__ import annotations

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.pool.devices import _adapters, parse_devices, resolve
from scellis_jupyter.pool.parallel import DataParallel
from scellis_jupyter.pool.sharding import RelayRun, ShardedRun

from fixtures import spec_text

wgpu_devices = [d for d in sc.devices() if d.backend == "wgpu"]
needs_wgpu = pytest.mark.skipif(not wgpu_devices, reason="no wgpu adapter")

# SGD with momentum, not Adam: Adam's first steps move every weight by about lr whatever the size of its
# gradient, so a near-zero gradient whose sign differs in the last bit (slices summed vs one batch) moves the
# weight by 2 lr; with SGD a weight's difference stays proportional to its gradient's, so rtol 1e-4 holds
SPEC = spec_text("digits_dp", name="digits-dp-gpu", optimizer={"name": "sgd", "lr": 0.05, "momentum": 0.9},
                 determinism="prod")
WIDE = spec_text("wide_mlp", name="wide-mlp-gpu", determinism="prod")
STEPS = 3


def test_device_names_cycle_over_the_workers_and_bad_ones_are_refused():
    assert parse_devices(None, None, 2) == ["reference", "reference"]
    assert parse_devices("wgpu", None, 3) == ["wgpu"] * 3
    assert parse_devices(None, ["wgpu:0", "wgpu:1"], 3) == ["wgpu:0", "wgpu:1", "wgpu:0"]
    with pytest.raises(sc.PoolError, match="mix the reference"):
        parse_devices(None, ["reference", "wgpu:0"], 2)
    with pytest.raises(sc.PoolError, match="adapter index"):
        parse_devices("wgpu:first", None, 1)
    with pytest.raises(sc.PoolError, match="names no device"):
        parse_devices(None, [], 1)


@needs_wgpu
def test_adapter_indices_cycle_when_there_are_fewer_adapters():
    n = len(_adapters())                                        # the GPUs, or every adapter where none is
    assert 1 <= n <= len(wgpu_devices)
    assert resolve(f"wgpu:{n}") is resolve("wgpu:0")            # one more than there are: back to the first
    assert resolve("wgpu:0").backend == "wgpu"
    assert resolve("wgpu:0").is_gpu or not any(d.is_gpu for d in wgpu_devices)   # a GPU before llvmpipe


def _torch_first_step(init: dict, x, y):
    torch = pytest.importorskip("torch")
    t = {k: torch.tensor(np.asarray(v, np.float64), requires_grad=True) for k, v in init.items()}
    W1 = next(t[n] for n in t if n.startswith("hidden") and t[n].ndim == 2)
    B1 = next(t[n] for n in t if n.startswith("hidden") and t[n].ndim == 1)
    W2 = next(t[n] for n in t if n.startswith("logits") and t[n].ndim == 2)
    B2 = next(t[n] for n in t if n.startswith("logits") and t[n].ndim == 1)
    xt = torch.tensor(np.asarray(x, np.float64))

    def lin(a, W, B):
        return a @ W + B if W.shape[0] == a.shape[1] else a @ W.T + B
    z = lin(torch.relu(lin(xt, W1, B1)), W2, B2)
    loss = torch.nn.functional.cross_entropy(z, torch.tensor(np.asarray(y, np.int64)))
    loss.backward()
    return float(loss.detach()), {k: v.grad.numpy() for k, v in t.items()}


@needs_wgpu
@pytest.mark.slow
def test_data_parallel_on_devices_follows_the_single_device_runs(pool):
    first = DataParallel(pool, SPEC, slices=4, steps=1, devices=["wgpu:0", "wgpu:1"])
    info = first.devices()
    assert [i["backend"] for i in info.values()] == ["wgpu", "wgpu"]
    assert first.tier == "prod"
    x, y = next(iter(first.batches()))
    red = first.gradient(x, y).result()                      # on the devices, reduced on the workers
    first.close()
    loss, tg = _torch_first_step(first.init, x, y)          # independent: float64 PyTorch on the CPU
    assert red["n"] == 60 and red["loss"] == pytest.approx(loss, rel=1e-5)
    for n in tg:
        np.testing.assert_allclose(red["grads"][n], tg[n], rtol=1e-4, atol=1e-6, err_msg=n)
    dp = DataParallel(pool, SPEC, slices=2, steps=STEPS, devices=["wgpu:0", "wgpu:1"])
    losses = dp.train()
    single = sc.Run(SPEC, device="wgpu", steps=STEPS)
    single.run_to_end()
    ref = sc.Run(SPEC, device="reference", steps=STEPS)
    ref.run_to_end()
    np.testing.assert_allclose(losses, single.loss_history, rtol=1e-5)
    np.testing.assert_allclose(losses, ref.loss_history, rtol=1e-4)
    w, sw = dp.weights(), single.weights()
    for k in sw:
        np.testing.assert_allclose(w[k], sw[k], rtol=1e-4, atol=1e-6, err_msg=k)
    hashes = dp.replica_hashes()                             # read back from each worker's device
    assert len(hashes) == 2 and len(set(hashes.values())) == 1
    dp.close()
    with pytest.raises(Exception, match="no engine"):        # the device buffers are gone
        dp.weights()


@needs_wgpu
@pytest.mark.slow
def test_sharded_state_and_relay_on_devices_are_green_where_one_is_red(pool):
    memory = sc.plan(WIDE, device="wgpu", fixes=False).peak_bytes - 1
    assert sc.plan(WIDE, device="wgpu", memory=memory).verdict == "red"
    single = sc.Run(WIDE, device="wgpu", steps=STEPS)
    single.run_to_end()
    sw = single.weights()
    for cls in (ShardedRun, RelayRun):
        run = cls(pool, WIDE, count=2, memory=memory, steps=STEPS, devices=["wgpu:0", "wgpu:1"])
        assert run.pool_plan.single_verdict == "red" and run.pool_plan.verdict == "green", run.pool_plan.table()
        losses = run.train()
        np.testing.assert_allclose(losses, single.loss_history, rtol=1e-5, err_msg=cls.__name__)
        w = run.weights()
        for k in sw:
            np.testing.assert_allclose(w[k], sw[k], rtol=1e-5, atol=1e-7, err_msg=f"{cls.__name__} {k}")
        assert all(0 < pk <= memory for pk in run.measured_peaks), (cls.__name__, run.measured_peaks, memory)
        run.close()
