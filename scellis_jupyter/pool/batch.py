"""Batch analysis on a Pool: a trained model's outputs over a large dataset cut into row blocks, in order.

Why weights and not a Run: a shard needs only the spec's graph and the trained weights, so a worker builds
the eval-mode forward Program for its block (cached per block size) without loading data or planning a
training step; the blocks come back stacked in shard order (`concat_rows`), whichever worker finished first.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from ..backends.device import device as pick
from ..errors import PoolError
from ..executor.executor import execute
from ..graph import functional as F
from ..program.schedule import compile_program
from ..program.training import forward_adapted
from ..spec import Spec
from .job import Job
from .parallel import cached
from .pool import JobResult, Pool


def _forward_program(spec: Spec, b: int, tier: str, names: tuple):
    inp = spec.input
    x = F.placeholder((b,) + tuple(inp["shape"]), inp["dtype"], "x")
    leaves = {n: F.placeholder(tuple(s), "f32", n) for n, s in names}
    out = forward_adapted(spec.graph, x, leaves, None, training=False)
    prog, leaf_nodes = compile_program([out], "reference", tier)
    by_id = {x.id: "x", **{v.id: k for k, v in leaves.items()}}
    return prog, [by_id[l.id] for l in leaf_nodes]


def predict_rows(x: np.ndarray, *, spec: Spec, weights: dict, tier: str) -> np.ndarray:
    """On a worker: the model's eval-mode output for rows `x`."""
    x = np.asarray(x)
    names = tuple((k, tuple(np.shape(v))) for k, v in sorted(weights.items()))
    prog, order = cached(("forward", spec.hash, len(x), tier, names), lambda: _forward_program(spec, len(x), tier, names))
    impl = pick("reference").fresh_impl()
    feeds = dict(weights, x=x.reshape((len(x),) + tuple(spec.input["shape"])))
    stor = []
    for name, j in zip(order, prog.leaves):
        v = prog.values[j]
        stor.append(impl.from_numpy(np.asarray(feeds[name]).astype(dt.to_numpy(v.dtype)).reshape(v.shape), v.dtype))
    (out,) = execute(prog, stor, impl)
    return np.array(impl.to_numpy(out))


def predict_job(spec, weights: dict, x: np.ndarray, *, rows: int = 256, tier: str = "debug", verify: str = "none",
                **job_kw) -> Job:
    """The Job of predicting `x` (already transformed as the model was trained) in blocks of `rows` rows."""
    spec = Spec.of(spec)
    x = np.asarray(x)
    if x.ndim < 1 or len(x) < 1:
        raise PoolError("batch analysis needs at least one row", where="batch_predict")
    per = int(np.prod(spec.input["shape"]))
    if x.size != len(x) * per:
        raise PoolError(f"rows of shape {list(x.shape[1:])} are not the model's input {list(spec.input['shape'])}",
                        where="batch_predict", hint="pass the same features the model was trained on")
    blocks = [x[i:i + rows] for i in range(0, len(x), int(rows))]
    return Job(predict_rows, inputs={"items": blocks},
               params={"spec": spec, "weights": {k: np.asarray(v, np.float32) for k, v in weights.items()},
                       "tier": tier},
               reduction="concat_rows", verify=verify, name="batch_predict", **job_kw)


def batch_predict(pool: Pool, run, x: np.ndarray, *, rows: int = 256, **kw) -> JobResult:
    """A trained `sc.Run`'s outputs for every row of `x`, computed in blocks on `pool`, stacked in order."""
    x = np.asarray(x)
    if getattr(run, "standardizer", None) is not None:      # the training rows' statistics, as Run.predict does
        x = run.dataset.transform(x)
    return pool.run(predict_job(run.spec, run.weights(), x, rows=rows, tier=run.tier, **kw))


def batch_evaluate(pool: Pool, run, x: np.ndarray, y: np.ndarray, *, metrics=None, rows: int = 256,
                   **kw) -> dict:
    """Metrics of a trained `sc.Run` over (x, y): outputs from `batch_predict` (blocks on workers, in order),
    then each catalog metric (default: the recipe's) over every row. Returns {metric: value, "rows": n}."""
    from ..catalog import make
    y = np.asarray(y)
    if len(y) != len(x):
        raise PoolError(f"{len(x)} rows but {len(y)} labels", where="batch_evaluate", hint="pass matching x and y")
    pred = batch_predict(pool, run, x, rows=rows, **kw).value
    out: dict = {"rows": int(len(y))}
    for name in metrics if metrics is not None else (run.spec.recipe.get("metrics") or []):
        m = make("metric", name)
        m.update(pred, y)
        v = m.compute()
        out[name] = float(v) if np.ndim(v) == 0 else np.asarray(v).tolist()
    return out
