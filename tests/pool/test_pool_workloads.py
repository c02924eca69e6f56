"""Sweeps, k-fold cross-validation and ensembles: real short sc.Runs on workers, on the one Job path."""
from __future__ import annotations

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.pool import Pool
from scellis_jupyter.pool.workloads import (ensemble, fold_summary, grid_cells, kfold, member_probs, random_cells,
                                            sweep, sweep_job, train_cell, with_recipe)

SPEC = """
name = "digits-tiny"
[data]
dataset = "digits"
split = { train = 0.8, val = 0.1, test = 0.1 }
[model]
nodes = [
  { op = "linear", out = 16 },
  { op = "relu" },
  { name = "logits", op = "linear", out = 10 },
]
[recipe]
loss = "cross_entropy"
optimizer = { name = "adamw", lr = 3e-3 }
epochs = 1
batch_size = 64
metrics = ["accuracy"]
determinism = "debug"
seed = 0
"""
STEPS = 4


def test_with_recipe_sets_nested_keys():
    s = sc.Spec.from_text(with_recipe(SPEC, {"optimizer.lr": 0.05, "batch_size": 32, "seed": 7}))
    assert s.recipe["optimizer"]["lr"] == 0.05 and s.recipe["batch_size"] == 32 and s.recipe["seed"] == 7


def test_cells():
    assert grid_cells({"a": [1, 2], "b": ["x", "y", "z"]}) == [
        {"a": a, "b": b} for a in [1, 2] for b in ["x", "y", "z"]]
    cells = random_cells({"optimizer.lr": {"log": (1e-4, 1e-1)}, "batch_size": [16, 32]}, n=50, seed=3)
    lrs = [c["optimizer.lr"] for c in cells]
    assert len(cells) == 50 and min(lrs) >= 1e-4 and max(lrs) <= 1e-1 and len(set(lrs)) == 50
    assert {c["batch_size"] for c in cells} == {16, 32}
    assert cells == random_cells({"optimizer.lr": {"log": (1e-4, 1e-1)}, "batch_size": [16, 32]}, n=50, seed=3)


def test_grid_sweep_reports_each_cell_as_it_lands_and_matches_a_local_run(pool, tmp_path):
    landed = []
    grid = {"optimizer.lr": [1e-3, 3e-2], "batch_size": [32, 64]}
    r = sweep(pool, SPEC, grid=grid, steps=STEPS, on_cell=lambda i, cell: landed.append((i, cell)))
    assert sorted(i for i, _ in landed) == [0, 1, 2, 3]
    assert [c["params"] for c in r.value] == grid_cells(grid)
    for cell in r.value:
        assert set(cell["metrics"]) >= {"val_accuracy", "val_loss"} and np.isfinite(cell["final_loss"])
    # a worker's cell is the very run a local sc.Run of that cell gives (deterministic reference path)
    local = train_cell(grid_cells(grid)[3], spec=SPEC, steps=STEPS)
    assert local["weights_hash"] == r.value[3]["weights_hash"]
    assert local["metrics"] == pytest.approx(r.value[3]["metrics"], rel=1e-12)
    assert len({c["weights_hash"] for c in r.value}) == 4          # the overrides reached the runs


def test_sweep_work_units_come_from_the_planner(tmp_path):
    job = sweep_job(SPEC, grid={"batch_size": [32, 64]}, steps=STEPS)
    small, big = (job.work_units(s) for s in job.shards())
    assert small > 0 and big == pytest.approx(2 * small, rel=0.05)   # FLOPs scale with the batch


def test_random_sweep_with_reference_verification(pool):
    r = sweep(pool, SPEC, random={"optimizer.lr": {"log": (1e-3, 1e-1)}}, n=2, seed=1, steps=STEPS,
              verify="reference")
    assert len(r.value) == 2 and r.checked == 2 and not r.rejected


def test_a_bad_sweep_key_is_refused_before_any_shard_runs():
    with pytest.raises(sc.SpecError):
        sweep_job(SPEC, grid={"optimizer.lr": [-1.0]}, steps=STEPS)
    with pytest.raises(sc.PoolError, match="grid= or random="):
        sweep_job(SPEC, steps=STEPS)


def test_kfold(pool):
    from sklearn.datasets import load_digits
    x, y = load_digits(return_X_y=True)
    x, y = (x[:400] / 16.0).astype(np.float32), y[:400].astype(np.int64)
    r = kfold(pool, SPEC, x, y, k=3, steps=STEPS)
    assert [f["fold"] for f in r.value] == [0, 1, 2]
    assert sum(f["n_val"] for f in r.value) == 400
    s = fold_summary(r.value)
    assert 0.0 <= s["accuracy"] <= 1.0 and np.isfinite(s["loss"])


def test_ensemble_mean_is_the_mean_of_its_members(pool):
    from sklearn.datasets import load_digits
    x = (load_digits().data[:20] / 16.0).astype(np.float32)
    r = ensemble(pool, SPEC, x, seeds=(0, 1), steps=STEPS)
    members = [member_probs(s, spec=SPEC, x=x, steps=STEPS) for s in (0, 1)]
    np.testing.assert_allclose(r.value, (members[0] + members[1]) / 2, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(r.value.sum(axis=1), 1.0, rtol=1e-12)
    assert not np.allclose(members[0], members[1])                 # the seeds made different members


@pytest.mark.slow
def test_sweep_on_two_worker_processes(tmp_path):
    with Pool(workers=2, ledger=tmp_path / "l.sqlite") as p:
        assert not p.cluster.scheduler_address.startswith("inproc://")
        pids = set(p.client.run(lambda: __import__("os").getpid()).values())
        r = sweep(p, SPEC, grid={"optimizer.lr": [1e-3, 3e-2]}, steps=STEPS, verify="reference")
        peers = {x.peer for x in r.receipts}
        assert p.ledger.verify()["receipts"] == 2
    assert len(pids) == 2 and len(peers) == 2 and r.checked == 2 and not r.rejected
    assert r.value[0]["weights_hash"] == train_cell({"optimizer.lr": 1e-3}, spec=SPEC, steps=STEPS)["weights_hash"]
