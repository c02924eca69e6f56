"""Models bigger than one device: a plan red on one device of a declared memory is green over two (sharded
optimizer state, layer relay), the planner's requires="pool" fixes run on a pool of two workers, each
worker's measured peak stays within its planned peak and the declared memory, and the losses match the one-device run
(bit for bit when sharded: the same Programs' arithmetic; rtol 1e-5 for the relay, as its composition test)."""
from __future__ import annotations

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.pool import Pool
from scellis_jupyter.pool.sharding import RelayRun, ShardedRun, pool_plan, run_fix

from fixtures import spec_text

WIDE = spec_text("wide_mlp")
STEPS = 4


@pytest.fixture(scope="module")
def memory():
    """One byte less than the single-device plan needs: red on one device."""
    return sc.plan(WIDE, device="reference", fixes=False).peak_bytes - 1


@pytest.fixture(scope="module")
def single():
    r = sc.Run(WIDE, device="reference", steps=STEPS)
    r.run_to_end()
    return r


def test_red_on_one_device_green_over_two(memory):
    p1 = sc.plan(WIDE, device="reference", memory=memory)
    assert p1.verdict == "red"
    pool_fixes = {f.kind: f for f in p1.fixes if f.requires == "pool"}
    assert {"shard_optimizer_state", "layer_relay"} <= set(pool_fixes)
    for fix in pool_fixes.values():
        pp = pool_plan(WIDE, fix, memory=memory)
        assert pp.count == 2 and pp.single_verdict == "red" and pp.verdict == "green", pp.table()
        assert max(d["peak_bytes"] for d in pp.devices) == fix.peak_bytes        # what the planner offered
        names = [n for d in pp.devices for n in d["params"]]
        assert len(names) == len(set(names)) == 8                 # every weight and bias on exactly one device


def test_sharded_state_runs_green_and_matches_the_single_device_run(pool, memory, single):
    p1 = sc.plan(WIDE, device="reference", memory=memory)
    fix = next(f for f in p1.fixes if f.kind == "shard_optimizer_state")
    run = run_fix(pool, WIDE, fix, memory=memory, steps=STEPS)
    assert isinstance(run, ShardedRun)
    losses = run.train()
    assert losses == single.loss_history                       # bit for bit
    w, sw = run.weights(), single.weights()
    for k in sw:
        np.testing.assert_array_equal(w[k], sw[k], err_msg=k)
    assert all(0 < pk <= memory for pk in run.measured_peaks), (run.measured_peaks, memory)
    planned = [d["peak_bytes"] for d in run.pool_plan.devices]
    assert all(m <= p for m, p in zip(run.measured_peaks, planned)), (run.measured_peaks, planned)
    state = [d["params"] for d in run.pool_plan.devices]
    assert not set(state[0]) & set(state[1]) and len(state[0]) + len(state[1]) == 8


def test_layer_relay_runs_green_and_matches_the_single_device_run(pool, memory, single):
    run = RelayRun(pool, WIDE, count=2, memory=memory, steps=STEPS)
    assert run.pool_plan.verdict == "green"
    losses = run.train()
    np.testing.assert_allclose(losses, single.loss_history, rtol=1e-5)
    w, sw = run.weights(), single.weights()
    for k in sw:
        np.testing.assert_allclose(w[k], sw[k], rtol=1e-5, atol=1e-7, err_msg=k)
    assert all(0 < pk <= memory for pk in run.measured_peaks), (run.measured_peaks, memory)
    planned = [d["peak_bytes"] for d in run.pool_plan.devices]
    assert all(m <= p for m, p in zip(run.measured_peaks, planned)), (run.measured_peaks, planned)


def test_too_little_memory_even_over_two_is_refused(pool):
    tiny = 200_000
    with pytest.raises(sc.PoolError, match="red"):
        ShardedRun(pool, WIDE, count=2, memory=tiny, steps=1)
    with pytest.raises(sc.PoolError, match="needs 3 workers"):
        RelayRun(pool, WIDE, count=3, steps=1)
    with pytest.raises(sc.PoolError, match="not one a pool runs"):
        p1 = sc.plan(WIDE, device="reference", memory=sc.plan(WIDE, device="reference", fixes=False).peak_bytes - 1)
        pool_plan(WIDE, next(f for f in p1.fixes if f.requires is None))


@pytest.mark.slow
def test_shard_and_relay_across_two_worker_processes(memory, single):
    with Pool(workers=2) as p:
        pids = set(p.client.run(lambda: __import__("os").getpid()).values())
        shard = ShardedRun(p, WIDE, count=2, memory=memory, steps=STEPS).train()
        relay = RelayRun(p, WIDE, count=2, memory=memory, steps=STEPS).train()
    assert len(pids) == 2 and __import__("os").getpid() not in pids
    assert shard == single.loss_history
    np.testing.assert_allclose(relay, single.loss_history, rtol=1e-5)


def test_a_relay_step_with_non_finite_gradients_updates_no_stage(pool):
    run = RelayRun(pool, WIDE, count=2, steps=2)
    before = run.weights()
    good = next(iter(run.batches()))
    bad_x = good[0].copy()
    bad_x[0, 0] = np.inf                                       # a poisoned example: every gradient is NaN
    run.batches = lambda: iter([(bad_x, good[1]), good])
    it = iter(run)
    next(it)
    assert run.skipped == 1
    after = run.weights()
    for k in before:
        np.testing.assert_array_equal(after[k], before[k], err_msg=k)
    next(it)
    assert run.skipped == 1 and any(not np.array_equal(run.weights()[k], before[k]) for k in before)
