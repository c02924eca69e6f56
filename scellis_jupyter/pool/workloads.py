"""Workloads on the one Job path: parameter sweeps (grid, random), k-fold cross-validation, ensembles.

Why Jobs of real runs: each shard is a short `sc.Run` of the spec with some recipe keys overridden, run on a
worker on the deterministic reference path, so a cell's metrics can be re-checked by re-execution and a
receipt's work units come from the planner's FLOP count of that cell's step program, never the clock.
"""
from __future__ import annotations

import functools
import itertools
from typing import Any, Callable

import numpy as np
import tomlkit

from ..errors import PoolError
from ..plan import plan as make_plan
from ..program.cost import program_flops
from ..run.run import Run
from ..spec import Spec
from .job import Job
from .pool import JobResult, Pool


def with_recipe(text: str, overrides: dict) -> str:
    """Spec text with recipe keys set: {"optimizer.lr": 1e-3, "batch_size": 32} (dotted = nested tables)."""
    doc = tomlkit.parse(text)
    recipe = doc.setdefault("recipe", tomlkit.table())
    for key, value in overrides.items():
        *parents, leaf = key.split(".")
        t = recipe
        for p in parents:
            if p not in t:
                t[p] = tomlkit.inline_table()
            elif not isinstance(t[p], dict):           # optimizer = "adamw" -> optimizer = { name = "adamw" }
                t[p] = {"name": str(t[p])}
            t = t[p]
        t[leaf] = value.item() if isinstance(value, np.generic) else value
    return tomlkit.dumps(doc)


def _text(spec) -> str:
    return spec.text if isinstance(spec, Spec) else Spec.of(spec).text


def train_cell(payload: dict, *, spec: str, steps: int, device: str = "reference") -> dict:
    """One sweep cell on a worker: train `steps` steps with the cell's overrides; its metrics and weights hash."""
    run = Run(Spec.from_text(with_recipe(spec, payload)), device=device, steps=steps)
    out = run.run_to_end()
    return {"params": dict(payload), "metrics": {k: float(v) for k, v in out["metrics"].items()},
            "final_loss": float(out["loss_history"][-1]), "weights_hash": out["weights_hash"]}


@functools.lru_cache(maxsize=256)
def _step_flops(text: str) -> int:
    return program_flops(make_plan(Spec.from_text(text), device="reference").step.program)


def _cell_work(payload: dict, *, spec: str, steps: int) -> int:
    """Work units of a cell: the planner's FLOPs of its step program times its steps."""
    return _step_flops(with_recipe(spec, payload)) * int(steps)


def grid_cells(grid: dict) -> list[dict]:
    """Every combination of `grid`'s values, in key order."""
    keys = list(grid)
    return [dict(zip(keys, vals)) for vals in itertools.product(*(list(grid[k]) for k in keys))]


def random_cells(space: dict, n: int, seed: int = 0) -> list[dict]:
    """`n` cells drawn from `space`: a list is a choice, (lo, hi) uniform, {"log": (lo, hi)} log-uniform."""
    rng = np.random.default_rng(seed)
    cells = []
    for _ in range(int(n)):
        c = {}
        for k, v in space.items():
            if isinstance(v, dict) and "log" in v:
                lo, hi = v["log"]
                c[k] = float(np.exp(rng.uniform(np.log(lo), np.log(hi))))
            elif isinstance(v, tuple) and len(v) == 2:
                c[k] = float(rng.uniform(*v))
            elif isinstance(v, list) and v:
                c[k] = v[int(rng.integers(len(v)))]
            else:
                raise PoolError(f"sweep space {k!r} = {v!r} is not a list, (lo, hi) or {{'log': (lo, hi)}}",
                                where="sweep", hint='give e.g. {"optimizer.lr": {"log": (1e-4, 1e-1)}}')
        cells.append(c)
    return cells


def sweep_job(spec, *, grid: dict | None = None, random: dict | None = None, n: int = 8, seed: int = 0,
              steps: int = 20, verify: str = "none", **job_kw) -> Job:
    """The Job of a sweep: one shard per cell (grid, or `n` random draws), each a short run of `spec`."""
    if (grid is None) == (random is None):
        raise PoolError("a sweep takes grid= or random=, exactly one", where="sweep",
                        hint='grid={"optimizer.lr": [1e-3, 1e-2]} or random={...}, n=8')
    cells = grid_cells(grid) if grid is not None else random_cells(random, n, seed)
    text = _text(spec)
    for c in cells:                                    # a bad key or value is refused here, not on a worker
        Spec.from_text(with_recipe(text, c))
    return Job(train_cell, inputs={"items": cells}, params={"spec": text, "steps": int(steps)},
               verify=verify, name="sweep", work=functools.partial(_cell_work, spec=text, steps=int(steps)),
               **job_kw)


def sweep(pool: Pool, spec, *, on_cell: Callable[[int, dict], None] | None = None, **kw) -> JobResult:
    """Run a sweep on `pool`; `on_cell(index, cell_result)` is called as each verified cell lands."""
    return pool.run(sweep_job(spec, **kw), on_shard=on_cell)


# ---- k-fold cross-validation ---------------------------------------------------------------------------
def _memory_spec(text: str) -> str:
    """The spec with its [data] dataset and split removed: the folds come in memory."""
    doc = tomlkit.parse(text)
    data = doc.get("data")
    if data is not None:
        for k in ("dataset", "split", "train", "val", "test"):
            data.pop(k, None)
    return tomlkit.dumps(doc)


def fold_run(payload: dict, *, spec: str, x: np.ndarray, y: np.ndarray, steps: int,
             device: str = "reference") -> dict:
    """Train on every fold but one and evaluate on the held-out fold."""
    tr, va = payload["train"], payload["val"]
    run = Run(spec, device=device, steps=steps, data={"train": (x[tr], y[tr]), "val": (x[va], y[va])})
    run.run_to_end()
    return {"fold": int(payload["fold"]), "n_val": int(len(va)),
            "metrics": {k: float(v) for k, v in run.evaluate("val", record=False).items()}}


def kfold(pool: Pool, spec, x: np.ndarray, y: np.ndarray, *, k: int = 5, seed: int = 0, steps: int = 20,
          verify: str = "none", **job_kw) -> JobResult:
    """k-fold cross-validation of `spec` on (x, y): value = per-fold results; `mean` metrics in each."""
    x, y = np.asarray(x), np.asarray(y)
    if len(x) != len(y) or len(x) < k:
        raise PoolError(f"k-fold needs as many labels as rows and at least k={k} rows; got {len(x)} rows, "
                        f"{len(y)} labels", where="kfold", hint="pass matching x and y")
    job = Job(fold_run, inputs={"n": len(x)}, params={"spec": _memory_spec(_text(spec)), "x": x, "y": y,
                                                      "steps": int(steps)},
              partitioner="kfold", partition={"k": int(k), "seed": int(seed)}, verify=verify, name="kfold", **job_kw)
    return pool.run(job)


def fold_summary(folds: list[dict]) -> dict[str, float]:
    """Each metric's mean over folds, weighted by the held-out fold sizes."""
    n = sum(f["n_val"] for f in folds)
    return {m: sum(f["metrics"][m] * f["n_val"] for f in folds) / n for m in folds[0]["metrics"]}


# ---- ensembles -----------------------------------------------------------------------------------------
def member_probs(seed: int, *, spec: str, x: np.ndarray, steps: int, device: str = "reference") -> np.ndarray:
    """One ensemble member (the spec at `seed`): its class probabilities on `x`."""
    run = Run(Spec.from_text(with_recipe(spec, {"seed": int(seed)})), device=device, steps=steps)
    run.run_to_end()
    z = np.asarray(run.predict(x), np.float64)
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z)
    return p / p.sum(axis=1, keepdims=True)


def ensemble(pool: Pool, spec, x: np.ndarray, *, seeds=(0, 1, 2), steps: int = 20, verify: str = "none",
             **job_kw) -> JobResult:
    """Train one member per seed; value = their mean class probabilities on `x` (averaged on workers)."""
    job = Job(member_probs, inputs={"items": [int(s) for s in seeds]},
              params={"spec": _text(spec), "x": np.asarray(x), "steps": int(steps)},
              reduction="mean", verify=verify, name="ensemble", **job_kw)
    return pool.run(job)
