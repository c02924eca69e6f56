"""What runs on a site's worker: loading its partition there, keeping it there, and one round of local
training on it with the engine's own step (a `Run` of the spec on the reference path).

Why a worker-local table: a site's rows are read by a loader that runs on its worker (a path it can read,
or a callable on an `own` pool) and are kept in this process's `_HELD`, keyed by federation and site. Tasks
return only what the strategy sends (an update's vectors) and metadata: no task here ever returns rows.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import blake3
import numpy as np
import tomlkit

from ..catalog.aggregations import Local, Update
from ..errors import FederatedError, ScellisError
from ..pool.job import content_hash

_HELD: dict[str, "SiteData"] = {}
_LOCK = threading.Lock()


@dataclass
class SiteData:
    """A site's partition and its memory between rounds (strategy state such as SCAFFOLD's c_i)."""

    x: np.ndarray
    y: np.ndarray
    memory: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)     # secure-aggregation keys, anything else the site keeps


def _read(source: Any) -> tuple[np.ndarray, np.ndarray]:
    """Rows from a loader: a callable returning (x, y), a .npz path with arrays x and y, or (x, y) itself."""
    if callable(source):
        got = source()
    elif isinstance(source, (str, os.PathLike)):
        with np.load(os.fspath(source)) as z:
            got = (z["x"], z["y"])
    else:
        got = source
    x, y = got
    return np.asarray(x), np.asarray(y)


def load(key: str, site: str, source: Any) -> dict:
    """Run the site's loader here and keep the rows; return only their count, shape and content hash."""
    try:
        x, y = _read(source)
    except FederatedError:
        raise
    except Exception as e:
        raise FederatedError(f"site {site!r} could not load its data: {type(e).__name__}: {e}",
                             where=f"site {site!r}", hint="check the loader (path, callable) on that site") from e
    if len(x) != len(y):
        raise FederatedError(f"site {site!r} has {len(x)} examples but {len(y)} labels", where=f"site {site!r}",
                             hint="its loader must return matching x and y")
    with _LOCK:
        _HELD[key] = SiteData(x, y)
    return {"site": site, "n": int(len(x)), "shape": list(x.shape[1:]), "hash": content_hash({"x": x, "y": y}),
            "labels": sorted({int(v) for v in np.unique(y)}) if y.dtype.kind in "iu" else None}


def held(key: str) -> SiteData:
    try:
        return _HELD[key]
    except KeyError:
        raise FederatedError(f"no site data under {key!r} on this worker", where="site",
                             hint="the site's worker restarted and lost its rows; load the site again") from None


def forget(key: str) -> None:
    with _LOCK:
        _HELD.pop(key, None)


def local_spec(text: str, optimizer: dict | None, seed: int, batch_size: int | None = None) -> str:
    """The spec a site trains: its [data] is the site's rows in memory (all of them train), its optimizer
    the strategy's (if given), a seed of its own per round (batch order), no evaluation."""
    doc = tomlkit.parse(text)
    data = doc.setdefault("data", tomlkit.table())
    for k in ("dataset", "split", "train", "val", "test", "standardize"):
        data.pop(k, None)
    data["split"] = {"train": 1.0}
    recipe = doc.setdefault("recipe", tomlkit.table())
    if optimizer is not None:
        recipe["optimizer"] = dict(optimizer)
    recipe.pop("metrics", None)
    if batch_size is not None:
        recipe["batch_size"] = int(batch_size)
    recipe["seed"] = int(seed)
    return tomlkit.dumps(doc)


def memory(x: np.ndarray, y: np.ndarray, classes: int | None = None):
    """The rows as the engine's in-memory data; `classes` is the federation's class count, which a site
    holding only some classes (label skew) cannot infer from its own labels."""
    from ..data.memory import MemoryData
    if classes is None:
        return {"train": (x, y)}
    return MemoryData({"train": (x, y)}, {}, [str(c) for c in range(int(classes))])


def train_local(spec: str, x: np.ndarray, y: np.ndarray, weights: dict, steps: int, local: Local, seed: int,
                batch: "int | str | None" = None, device: str = "reference",
                classes: int | None = None) -> tuple[dict, dict, float, float]:
    """`steps` optimizer steps of the engine's Run from `weights`: (weights, optimizer state, lr, last loss).
    `batch`: the spec's batch size (None), another, or "full" (the site's whole partition each step)."""
    from ..run.run import Run
    bs = len(x) if batch == "full" else batch
    run = Run(local_spec(spec, local.optimizer, seed, bs), device=device, steps=int(local.step_offset) + int(steps),
              data=memory(x, y, classes), weights={k: np.asarray(v, np.float32) for k, v in weights.items()})
    for leaf in run.step_prog.leaves:             # strategy-given optimizer state (anchor, correction, moments)
        if leaf.role != "optimizer_state":
            continue
        pname, slot = leaf.name.rsplit(".", 1)
        given = local.slots.get(slot, {}).get(pname)
        if given is not None:
            a = np.asarray(given, np.float64).astype(np.float32).reshape(leaf.node.shape)
            run.values[leaf.name] = run.impl.from_numpy(a, leaf.node.dtype)
    run.step = int(local.step_offset)              # a continued optimizer (DiLoCo's inner AdamW) keeps its t
    for _ in run:
        pass
    out = {k: np.asarray(v, np.float64) for k, v in run.weights().items()}
    state = {p: {s: np.asarray(a, np.float64) for s, a in st.items()} for p, st in run.optimizer_state().items()}
    return out, state, float(run.base_lr), float(run.loss_history[-1])


_STRATEGIES: dict[str, Any] = {}


def entry_hash(entry: Any) -> str | None:
    """The content hash of a catalog entry: blake3 of its kind, name and source file's bytes; None for an
    entry with no file (a notebook cell, `__main__`), which a peer cannot hold in its own catalog."""
    origin = getattr(entry, "origin", "") or ""
    if not origin or origin.startswith("<") or not os.path.isfile(origin):
        return None
    with open(origin, "rb") as f:
        src = f.read()
    return blake3.blake3(f"{entry.kind}\0{entry.name}\0".encode() + src).hexdigest()


def strategy_ref(entry: Any, params: dict | None) -> dict | None:
    """What a consortium or open federation sends instead of code: the entry's name, content hash and
    hyperparameters (plain data); None when the entry has no file to hash."""
    h = entry_hash(entry)
    return None if h is None else {"aggregation": entry.name, "hash": h, "params": dict(params or {})}


def _from_catalog(ref: dict) -> Any:
    """The peer's own catalog entry named by `ref`, refused unless its content hash is the sender's."""
    from ..catalog import get as catalog_get
    name, want = str(ref.get("aggregation")), str(ref.get("hash"))
    try:
        entry = catalog_get("aggregation", name)
    except ScellisError:
        raise FederatedError(f"this site's catalog has no aggregation {name!r}", where="site catalog",
                             code="federated-strategy", hint="install the same catalog entry on every site, or use "
                                                             "an own pool to send a user-written strategy") from None
    have = entry_hash(entry)
    if have != want:
        raise FederatedError(f"aggregation {name!r} in this site's catalog has content hash "
                             f"{(have or 'none')[:16]}, the federation's has {want[:16]}", where="site catalog",
                             code="federated-strategy", hint="run the same version of the entry on every site")
    return entry.make(**dict(ref.get("params") or {}))


def _strategy(obj: Any) -> Any:
    """A strategy as shipped: cloudpickle bytes (own pools only), or a catalog reference (name, content
    hash, params) resolved in this peer's own catalog; each built once per worker process."""
    if isinstance(obj, dict):
        key = content_hash(obj)
        if key not in _STRATEGIES:
            _STRATEGIES[key] = _from_catalog(obj)
        return _STRATEGIES[key]
    if not isinstance(obj, bytes):
        return obj
    key = blake3.blake3(obj).hexdigest()
    if key not in _STRATEGIES:
        import cloudpickle
        _STRATEGIES[key] = cloudpickle.loads(obj)
    return _STRATEGIES[key]


def initial_weights(key: str, spec: str, classes: int | None) -> dict:
    """The spec's initial weights, built on the first site from its rows' shape (a module function, so
    only its name travels)."""
    d = held(key)
    from ..run.run import Run
    run = Run(local_spec(spec, None, 0), device="reference", steps=1, data=memory(d.x, d.y, classes))
    return {k: np.asarray(v, np.float64) for k, v in run.weights().items()}


def round_update(key: str, site: str, spec: str, weights: dict, version: int, steps: int, strategy: Any,
                 state: dict, seed: int, mask: Callable | None = None, batch: "int | str | None" = None,
                 classes: int | None = None) -> dict:
    """One round on the site: local training, the strategy's contribution (and its memory kept here).

    Returns {"site", "n", "version", "loss", "vectors"}: what leaves the site. `mask` (secure
    aggregation, privacy clipping) transforms the vectors before they leave.
    """
    d = held(key)
    try:
        strategy = _strategy(strategy)
    except ScellisError as e:
        g = e.diagnostic
        raise FederatedError(f"site {site!r}: {g.message}", where=f"site {site!r}, {g.where}", hint=g.hint,
                             code=g.code) from None
    local = strategy.local(state, d.memory, weights)
    try:
        end, opt_state, lr, loss = train_local(spec, d.x, d.y, weights, steps, local, seed, batch, classes=classes)
    except ScellisError as e:                    # the engine's diagnostic, naming the site it happened on
        g = e.diagnostic
        raise FederatedError(f"site {site!r}: {g.message}", where=f"site {site!r}" + (f", {g.where}" if g.where else ""),
                             hint=g.hint, code=g.code) from None
    up = Update(site, {k: np.asarray(v, np.float64) for k, v in weights.items()}, end, len(d.x), int(steps), lr,
                int(version), loss, opt_state)
    vectors, d.memory = strategy.contribution(up, state, d.memory)
    out = {"site": site, "n": len(d.x), "version": int(version), "loss": loss, "vectors": vectors}
    return mask(out, d) if mask is not None else out
