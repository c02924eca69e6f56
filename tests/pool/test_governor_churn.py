"""Fair to the volunteer (a per-peer budget governor, stop on demand) and robust to churn (a killed worker)."""
from __future__ import annotations

import os
import signal
import time
from collections import Counter

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.pool import Job, Pool
from scellis_jupyter.pool.governor import Governor
from scellis_jupyter.pool.workloads import grid_cells, sweep, train_cell


def cube(x):
    return np.float64(x) ** 3


def slow_cube(x):
    time.sleep(0.15)
    return np.float64(x) ** 3


def units(x):
    return 10 * (x + 1)                     # the job's cost model: shard x costs 10 (x + 1) work units


def test_a_peer_takes_no_more_than_its_work_budget(tmp_path):
    gov = Governor()
    with Pool(workers=2, processes=False, governor=gov, ledger=tmp_path / "l.sqlite") as p:
        small, big = p.workers()
        gov.max_work = {small: 60}
        r = p.run(Job(cube, inputs={"items": list(range(8))}, work=units))
        rep = gov.report()
    assert r.value == [cube(i) for i in range(8)]
    by_peer = Counter()
    for x in r.receipts:
        by_peer[x.peer] += x.work_units
    assert by_peer[small] <= 60 and by_peer[small] + by_peer[big] == sum(units(i) for i in range(8))
    assert rep[small]["work_units"] <= 60 and rep[small]["budget"] == 60


def test_a_share_caps_each_peers_part_of_a_job():
    gov = Governor(max_share=0.5)
    with Pool(workers=3, processes=False, governor=gov, ledger=None) as p:
        r = p.run(Job(cube, inputs={"items": list(range(9))}, work=units))
        spent = dict(gov.job_spent)
    total = sum(units(i) for i in range(9))
    assert r.value == [cube(i) for i in range(9)]
    assert sum(spent.values()) == total and max(spent.values()) <= 0.5 * total


def test_budgets_that_cannot_cover_the_job_are_a_diagnostic():
    gov = Governor(max_work=25)
    with Pool(workers=2, processes=False, governor=gov) as p:
        with pytest.raises(sc.PoolError, match="no peer's budget has them") as e:
            p.run(Job(cube, inputs={"items": list(range(8))}, work=units))
    assert e.value.diagnostic.code == "pool-budget" and "max_work" in e.value.diagnostic.hint
    with pytest.raises(sc.PoolError, match="max_share"):
        Governor(max_share=0.0)


def test_a_volunteer_stops_on_demand_mid_job_and_nothing_is_lost(tmp_path):
    with Pool(workers=2, processes=False, ledger=tmp_path / "l.sqlite") as p:
        keep, leave = p.workers()
        landed = []

        def on_shard(i, v):
            landed.append(i)
            if len(landed) == 1:
                p.stop(leave)                        # the volunteer wants its machine back

        r = p.run(Job(slow_cube, inputs={"items": list(range(10))}, verify="reference", reference=cube),
                  on_shard=on_shard)
        assert p.ledger.verify()["receipts"] == 10
        rep = p.governor.report()
    assert r.value == [cube(i) for i in range(10)]
    peers = Counter(x.peer for x in r.receipts)
    assert peers[leave] <= 2 and peers[keep] >= 8              # at most what it had finished when it stopped
    assert rep[leave]["stopped"] and rep[leave]["work_units"] <= 2   # queued shards were refunded and moved
    assert len({x.shard for x in r.receipts}) == 10 and not r.rejected


SPEC = """
name = "digits-churn"
[data]
dataset = "digits"
split = { train = 0.8, val = 0.1, test = 0.1 }
[model]
nodes = [{ op = "linear", out = 16 }, { op = "relu" }, { name = "logits", op = "linear", out = 10 }]
[recipe]
loss = "cross_entropy"
optimizer = { name = "adamw", lr = 3e-3 }
epochs = 1
batch_size = 64
metrics = ["accuracy"]
determinism = "debug"
seed = 0
"""


@pytest.mark.slow
def test_a_worker_process_killed_mid_sweep_loses_nothing_and_mints_no_receipt_twice(tmp_path):
    grid = {"optimizer.lr": [1e-3, 3e-3, 1e-2], "batch_size": [32, 64]}
    with Pool(workers=2, ledger=tmp_path / "l.sqlite") as p:
        pids = p.client.run(os.getpid)
        victim = sorted(pids)[1]
        killed = []

        def on_cell(i, cell):
            if not killed:
                os.kill(pids[victim], signal.SIGKILL)       # the worker process dies mid-sweep
                killed.append(i)

        t0 = time.monotonic()
        r = sweep(p, SPEC, grid=grid, steps=2, on_cell=on_cell)
        print(f"sweep of 6 cells with a worker killed: {time.monotonic() - t0:.1f} s")
        rep = p.ledger.verify()
        alive = set(p.workers())
    assert killed and victim not in alive
    assert len(r.value) == 6 and rep["receipts"] == 6
    shards = [x.shard for x in r.receipts]
    assert len(set(shards)) == 6                                   # one receipt per shard, none twice
    assert [c["params"] for c in r.value] == grid_cells(grid)
    assert r.value[5]["weights_hash"] == train_cell(grid_cells(grid)[5], spec=SPEC, steps=2)["weights_hash"]
    assert all(np.isfinite(c["final_loss"]) for c in r.value)


def test_a_time_share_rests_each_peer_between_shards():
    """max_time=0.4: each peer is busy at most 40% of the job's time (plus the shard it is finishing), so
    the job takes at least (busy time of all peers) / (peers x 0.4); every shard still lands once."""
    gov = Governor(max_time=0.4)
    with Pool(workers=2, processes=False, governor=gov) as p:
        t = time.monotonic()
        r = p.run(Job(slow_cube, inputs={"items": list(range(6))}))
        elapsed = time.monotonic() - t
        rep = gov.report()
    assert r.value == [cube(i) for i in range(6)]
    busy = [d["busy_s"] for d in rep.values()]
    assert sum(busy) >= 6 * 0.15                           # each shard sleeps 0.15 s on its peer
    for b in busy:                                          # the share, give or take the last shard
        assert b <= 0.4 * elapsed + 0.15 + 0.1, (busy, elapsed)
    assert elapsed >= sum(busy) / (2 * 0.4) - 0.3, (busy, elapsed)
    with pytest.raises(sc.PoolError, match="max_time"):
        Governor(max_time=1.5)
