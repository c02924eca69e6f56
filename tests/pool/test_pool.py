"""Pools on Dask: the one Job path, verification against byzantine workers, quarantine, worker reductions."""
from __future__ import annotations

import random
import threading
import time

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.pool import Job, Pool

LIES: list = []                     # (shard payload, worker) of every lie told, shared in-process
_LOCK = threading.Lock()


def square(x, k=1):
    return np.float64(x) ** 2 * k


def matmul(p):
    return p["a"] @ p["b"]


class Liar:
    """A byzantine wrapper: on the `bad` workers it perturbs, returns garbage or the wrong shape, at `rate`."""

    def __init__(self, fn, bad: set, mode: str = "perturb", rate: float = 1.0, seed: int = 0):
        self.fn, self.bad, self.mode, self.rate = fn, set(bad), mode, rate
        self.rng = random.Random(seed)

    def __call__(self, payload, **params):
        from distributed import get_worker
        out = self.fn(payload, **params)
        if get_worker().address not in self.bad or self.rng.random() >= self.rate:
            return out
        with _LOCK:
            LIES.append((repr(payload)[:40], get_worker().address))
        if self.mode == "raise":
            raise RuntimeError("a byzantine worker raising")
        if self.mode == "garbage":
            return "garbage"
        if self.mode == "shape":
            return np.zeros((1,) + np.shape(out))
        return out * (1 + 1e-3) + 1e-3


@pytest.fixture(scope="module")
def pool3():
    with Pool(workers=3, processes=False) as p:
        yield p


@pytest.fixture(autouse=True)
def fresh(pool3):
    LIES.clear()
    pool3.quarantined.clear()


def honest(n=12, k=3):
    return [square(i, k) for i in range(n)]


def test_pool_of_one_is_in_process_and_reduces_on_a_worker():
    with Pool() as p:
        assert p.cluster.scheduler_address.startswith("inproc://")
        assert len(p.workers()) == 1
        r = p.run(Job(square, inputs={"items": list(range(5))}, params={"k": 2}))
        assert r.value == [0, 2, 8, 18, 32] and r.receipts == []   # no ledger given: no receipts


def test_reductions_run_on_workers(pool3):
    from distributed import get_task_stream
    got = []
    with get_task_stream(pool3.client) as ts:
        r = pool3.run(Job(square, inputs={"items": list(range(9))}, reduction="mean"),
                      on_shard=lambda i, v: got.append(i))
    assert r.value == pytest.approx(np.mean([i * i for i in range(9)]), rel=1e-15)
    assert sorted(got) == list(range(9))
    # the reducer's leaf/combine/finish tasks ran on the workers: 9 leaves, 8 combines, 1 finish
    reduce_tasks = [t for t in ts.data if str(t["key"]).startswith(("_leaf", "_reduce"))]
    assert len(reduce_tasks) == 9 + 8 + 1
    assert {t["worker"] for t in reduce_tasks} <= set(pool3.workers())


@pytest.mark.parametrize("mode", ["perturb", "garbage", "shape", "raise"])
@pytest.mark.parametrize("verify", ["reference", "quorum"])
def test_byzantine_worker_always_caught(pool3, verify, mode):
    bad = pool3.workers()[1]
    r = pool3.run(Job(Liar(square, {bad}, mode), inputs={"items": list(range(12))}, params={"k": 3},
                      verify=verify, reference=square))
    assert r.value == honest()                                 # nothing the liar said entered the reduction
    assert LIES, "the liar never ran: the test proves nothing"
    assert {w for _, w, _ in r.rejected} == {bad} and pool3.quarantined == {bad}
    assert bad not in pool3.workers()


def test_a_worker_that_lies_sometimes_is_caught_every_time(pool3):
    # one liar at rate 0.5 among three workers, quorum of two: every lie is rejected, the value is exact.
    # (Two peers telling the *same* lie in one quorum of two would pass: quorum assumes one honest replica.)
    bad = {pool3.workers()[2]}
    r = pool3.run(Job(Liar(square, bad, "perturb", rate=0.5, seed=3), inputs={"items": list(range(30))},
                      params={"k": 3}, verify="quorum", reference=square))
    assert r.value == honest(30)
    assert LIES and {w for _, w, _ in r.rejected} == bad      # every lie told was rejected: the value is exact


def test_freivalds_catches_a_perturbed_product(pool3):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((60, 20)), rng.standard_normal((20, 30))
    bad = pool3.workers()[0]
    r = pool3.run(Job(Liar(matmul, {bad}), inputs={"a": a, "b": b}, partitioner="row_blocks",
                      partition={"blocks": 6}, reduction="concat_rows", verify="freivalds", rounds=20))
    assert LIES and pool3.quarantined == {bad}
    np.testing.assert_allclose(r.value, a @ b, rtol=1e-12, atol=1e-12)
    assert all(m.startswith("fails Freivalds") for _, _, m in r.rejected)


def test_spot_checks_catch_at_the_stated_rate():
    trials, fraction, caught = 200, 0.3, 0
    with Pool() as p:
        liar = Liar(square, set(p.workers()))
        for t in range(trials):
            p.quarantined.clear()
            try:
                p.run(Job(liar, inputs={"items": [t]}, verify="spot", fraction=fraction, reference=square))
            except sc.RejectedResult:
                caught += 1
    assert abs(caught / trials - fraction) < 4 * (fraction * (1 - fraction) / trials) ** 0.5


def test_no_trustworthy_worker_left_is_a_diagnostic():
    with Pool() as p:
        with pytest.raises(sc.RejectedResult) as e:
            p.run(Job(Liar(square, set(p.workers())), inputs={"items": [1]}, verify="reference", reference=square))
    assert e.value.diagnostic.code == "pool-rejected" and "quarantined" in str(e.value)


def test_a_reduction_that_does_not_match_its_shards(pool3):
    ragged = lambda x: np.ones(x)                             # noqa: E731
    with pytest.raises(sc.PoolError, match="reduction 'mean' cannot combine"):
        pool3.run(Job(ragged, inputs={"items": [2, 3]}, reduction="mean"))


def test_unreachable_address_is_a_clear_error_in_bounded_time():
    t = time.monotonic()
    with pytest.raises(sc.PoolUnreachable) as e:
        Pool(address="tcp://127.0.0.1:9", timeout=1.0)
    assert time.monotonic() - t < 10
    d = e.value.diagnostic
    assert d.code == "pool-unreachable" and "tcp://127.0.0.1:9" in d.message and d.hint
    assert str(e.value).startswith("error[pool-unreachable] at Pool:")


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), -1.0, 0.0])
def test_a_timeout_that_is_not_positive_and_finite_is_refused_before_dask(timeout):
    """Dask's own error for nan/inf is a KeyError on a time unit; a negative one read 'within -1 s'."""
    with pytest.raises(sc.PoolError) as e:
        Pool(address="tcp://127.0.0.1:9", timeout=timeout)
    d = e.value.diagnostic
    assert type(e.value) is sc.PoolError and d.where == "Pool" and "timeout" in d.message and d.hint
    assert f"{timeout:g}" in d.message and "within" not in d.message


def test_a_failing_shard_without_verification_is_a_diagnostic(pool3):
    def boom(x):
        raise ZeroDivisionError("no")
    with pytest.raises(sc.PoolError, match="shard 0 failed on .*ZeroDivisionError") as e:
        pool3.run(Job(boom, inputs={"items": [1]}))
    assert e.value.diagnostic.code == "pool" and not pool3.quarantined


def slow_square(x):
    time.sleep(0.3)
    return np.float64(x) ** 2


def test_a_worker_leaving_mid_job_loses_nothing_and_mints_no_receipt_twice(tmp_path):
    with Pool(workers=2, processes=False, ledger=tmp_path / "l.sqlite") as p:
        gone = p.workers()[0]
        victim = next(w for w in p.cluster.workers.values() if w.address == gone)
        timer = threading.Timer(0.15, lambda: p.client.loop.add_callback(victim.close))
        timer.start()
        r = p.run(Job(slow_square, inputs={"items": list(range(6))}, verify="reference"))
        timer.join()
        assert gone not in p.workers()                             # it really left mid-job
        rep = p.ledger.verify()
    assert r.value == [float(i * i) for i in range(6)]
    assert rep["receipts"] == 6 and len({x.shard for x in r.receipts}) == 6
    assert all(x.peer != gone for x in r.receipts)                 # each shard took 0.3 s; it left at 0.15 s
