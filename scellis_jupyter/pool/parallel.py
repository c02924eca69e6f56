"""Data-parallel training on a Pool: each step every worker computes gradients on its slice of the batch, the
slices' gradients are tree-reduced on workers in a fixed order, and every worker applies the same update.

Why this shape: the slices are fixed by `slices` (not by how many workers there are) and the reduction is a
pairwise tree over slice index in float64 (catalog reducer `grad_mean`), so the reduced gradient, and so the
whole run, is bit-identical on 1 or N workers, and equals the single-process full-batch gradient up to f32
rounding of the per-slice means. Each worker keeps its own replica of the weights and optimizer state
(Dask data on that worker); only the reduced gradient moves between workers, and only the loss comes back.
The gradient Program is the step builder's own (a rank that owns no parameter sends every gradient); the
update Program is the same guard, clipping and optimizer update the single-device step ends with. Workers
run the Programs on the reference backend (numpy), each task on its own allocator.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .. import dtypes as dt
from ..backends.device import device as pick
from ..catalog import get as catalog_get
from ..catalog import make
from ..errors import PoolError
from ..executor.executor import execute, run_numpy
from ..graph import functional as F
from ..plan.model import _verdict
from ..plan.plan import plan as make_plan
from ..program.options import StepOptions
from ..program.schedule import compile_program
from ..program.training import build_train_step
from ..program.update import all_finite, clip_grads, donated, optimizer_update
from ..spec import Spec
from .devices import engine, new_run_id, parse_devices, release, resolve
from .host import Host, own_only
from .job import content_hash
from .tree import pairwise


def gradient_options(spec) -> StepOptions:
    """Step options whose Program outputs the loss and every parameter's gradient and updates nothing: the
    last of len(params)+1 shard ranks owns no parameter (largest-first placement puts one on each other rank)."""
    n = len(Spec.of(spec).graph.params)
    return StepOptions(shard=(n, n + 1))


_BUILT: dict[tuple, Any] = {}      # per process (a worker builds each Program once): key -> built


def cached(key: tuple, build: Callable[[], Any]) -> Any:
    """A Program built once per process, by (what, spec hash, sizes...) key."""
    got = _BUILT.get(key)
    if got is None:
        if len(_BUILT) > 256:
            _BUILT.clear()
        got = _BUILT[key] = build()
    return got


def unclipped(spec: Spec) -> Spec:
    """The spec without gradient clipping: a slice's gradients are clipped only once reduced (the update does)."""
    r = spec.recipe
    if r.get("clip_grad_norm") is None and r.get("clip_grad_value") is None:
        return spec
    import tomlkit
    doc = tomlkit.parse(spec.text)
    for k in ("clip_grad_norm", "clip_grad_value"):
        doc["recipe"].pop(k, None)
    return Spec.from_text(tomlkit.dumps(doc), source=spec.source, base_dir=spec.base_dir, data=spec.memory)


def _grad_step(spec: Spec, b: int, tier: str):
    return cached(("grad", spec.hash, b, tier),
                  lambda: build_train_step(unclipped(spec), b, "reference", tier, options=gradient_options(spec)))


def slice_gradient(spec: Spec, tier: str, replica: tuple, x: np.ndarray, y) -> dict:
    """On a worker: the mean loss and gradients of one slice of a batch at the replica's weights."""
    st = _grad_step(spec, len(x), tier)
    if any(l.name.startswith("rng:") for l in st.leaves):
        raise PoolError("a data-parallel step with dropout would draw other masks per slice than one batch",
                        where=f"spec {spec.name}", hint="drop the dropout layers, or train it with sc.Run")
    params = replica[0]
    feeds = {"x": x, "y": y, **{n: params[n] for n in st.param_names}}
    out = run_numpy(st, {l.name: feeds[l.name] for l in st.leaves}, pick("reference").fresh_impl())
    return {"n": len(x), "loss": float(out["loss"]), "grads": {n: out[f"grad:{n}"] for n in st.param_names}}


def update_program(spec: Spec, tier: str, shapes: tuple, backend: str = "reference"):
    """The update half of spec's step as its own Program: finite guard, clipping, optimizer update.

    shapes: ((name, shape), ...) in the step's parameter order. Returns (program, leaf names, output names)."""
    key = ("update", spec.hash, tier, shapes) + ((backend,) if backend != "reference" else ())
    return cached(key, lambda: _build_update(spec, tier, shapes, backend))


def _build_update(spec: Spec, tier: str, shapes: tuple, backend: str = "reference"):
    r = spec.recipe
    cfg = dict(r.get("optimizer") or {"name": "adamw"})
    opt = make("optimizer", cfg.pop("name"), **cfg)
    meta: dict[int, tuple] = {}
    names = [n for n, _ in shapes]
    ps = {n: F.placeholder(tuple(s), "f32", n) for n, s in shapes}
    gs = {n: F.placeholder(tuple(s), "f32", f"grad:{n}") for n, s in shapes}
    lr, step = F.placeholder((), "f32", "lr"), F.placeholder((), "f32", "step")
    for n in names:
        meta[ps[n].id], meta[gs[n].id] = (n, "parameter"), (f"grad:{n}", "data")
    meta[lr.id], meta[step.id] = ("lr", "scalar"), ("step", "scalar")
    grads = [gs[n] for n in names]
    finite = all_finite(grads)
    grads = dict(zip(names, clip_grads(grads, r.get("clip_grad_norm"), r.get("clip_grad_value"))))
    outs, out_names, donate = [finite], ["finite"], {}
    for n in reversed(names):                      # the order the single-device step updates them in
        new_w, st, new_st = optimizer_update(opt, n, ps[n], grads[n], step, lr, finite, meta)
        donated(outs, out_names, donate, ps[n], new_w, f"param:{n}")
        for slot, s in st.items():
            donated(outs, out_names, donate, s, new_st[slot], f"state:{n}.{slot}")
    prog, leaves = compile_program(outs, backend, tier, donate=donate)
    return prog, [meta[l.id][0] for l in leaves], out_names


def apply_update(spec: Spec, tier: str, shapes: tuple, replica: tuple, reduced: dict, lr: float, step: float) -> tuple:
    """On a worker: the replica (weights, optimizer state) after the update with the reduced gradients."""
    prog, leaf_names, out_names = update_program(spec, tier, shapes)
    params, state = replica
    feeds = {**params, **state, **{f"grad:{k}": v for k, v in reduced["grads"].items()}, "lr": lr, "step": step}
    impl = pick("reference").fresh_impl()
    stor = []
    for name, j in zip(leaf_names, prog.leaves):
        v = prog.values[j]
        stor.append(impl.from_numpy(np.asarray(feeds[name]).astype(dt.to_numpy(v.dtype)).reshape(v.shape), v.dtype))
    got = {n: np.array(impl.to_numpy(o)) for n, o in zip(out_names, execute(prog, stor, impl))}
    new_p = {k[6:]: v for k, v in got.items() if k.startswith("param:")}
    new_s = {k[6:]: v for k, v in got.items() if k.startswith("state:")}
    return dict(params, **new_p), dict(state, **new_s)


# ---- on a worker bound to a wgpu device: the replica stays in device buffers (pool/devices.py) --------------
def _dev_grad_step(spec: Spec, b: int, tier: str, backend: str):
    return cached(("grad", spec.hash, b, tier, backend),
                  lambda: build_train_step(unclipped(spec), b, backend, tier, options=gradient_options(spec)))


def dev_init(run: str, name: str, replica: tuple) -> int:
    """On a worker: open its device for run `run` and upload the replica (weights, optimizer state)."""
    eng = engine(run, name)
    with eng.lock:
        for part in replica:
            for n, a in part.items():
                eng.values[n] = eng.impl.from_numpy(np.asarray(a, np.float32), "f32")
    return 0


def dev_slice_gradient(run: str, spec: Spec, tier: str, token: int, x: np.ndarray, y) -> dict:
    """On a worker: one slice's mean loss and gradients, computed on its device at the replica's weights
    there; the gradients come back to the host for the tree reduction."""
    eng = engine(run)
    with eng.lock:
        st = _dev_grad_step(spec, len(x), tier, eng.impl.name)
        if any(l.name.startswith("rng:") for l in st.leaves):
            raise PoolError("a data-parallel step with dropout would draw other masks per slice than one batch",
                            where=f"spec {spec.name}", hint="drop the dropout layers, or train it with sc.Run")
        feeds = {"x": x, "y": y}
        leaves = [eng.values[l.name] if l.name in eng.values and l.name not in feeds
                  else eng.put(f"in:{l.name}:{len(x)}", feeds[l.name], l.node.dtype, l.node.shape) for l in st.leaves]
        got = dict(zip(st.outputs, execute(st.program, leaves, eng.impl)))
        names = ["loss"] + [f"grad:{n}" for n in st.param_names]
        arr = eng.impl.read_many([got[k] for k in names])
    return {"n": len(x), "loss": float(arr[0]), "grads": dict(zip(st.param_names, arr[1:]))}   # read_many's own arrays


def dev_apply_update(run: str, spec: Spec, tier: str, shapes: tuple, token: int, reduced: dict, lr: float,
                     step: float) -> int:
    """On a worker: the update with the reduced gradients, applied to the replica in its device buffers."""
    eng = engine(run)
    with eng.lock:
        prog, leaf_names, out_names = update_program(spec, tier, shapes, eng.impl.name)
        feeds = {**{f"grad:{k}": v for k, v in reduced["grads"].items()}, "lr": lr, "step": step}
        stor = []
        for name, j in zip(leaf_names, prog.leaves):
            v = prog.values[j]
            stor.append(eng.put(f"in:{name}", feeds[name], v.dtype, v.shape) if name in feeds else eng.values[name])
        for n, o in zip(out_names, execute(prog, stor, eng.impl)):
            kind, _, rest = n.partition(":")
            if kind in ("param", "state"):
                eng.values[rest] = o
        eng.step = token + 1
    return token + 1


def dev_replica(run: str, token: int, names: list, state_names: list) -> tuple:
    """On a worker: its replica read back from the device (weights, optimizer state)."""
    eng = engine(run)
    with eng.lock:
        got = eng.read(list(names) + list(state_names))
    return {n: got[n] for n in names}, {n: got[n] for n in state_names}


def dev_release(run: str) -> bool:
    return release(run)


def _loss_of(reduced: dict) -> float:
    return float(reduced["loss"])


def _replica_hash(replica: tuple) -> str:
    return content_hash({"params": replica[0], "state": replica[1]})


def _reduce_step(name: str, op: str, *args):
    return getattr(catalog_get("reducer", name).make(), op)(*args)


def tree_reduce(client, name: str, futures: list) -> Any:
    """Pairwise combination of `futures` (in their order) on workers with reducer `name`; returns the future
    of the finished value, left on a worker. The order is fixed, so the value does not depend on timing."""
    def step(op):
        return lambda *args: client.submit(_reduce_step, name, op, *args, pure=False)
    return step("finish")(pairwise([step("leaf")(i, f) for i, f in enumerate(futures)], step("combine")))


class DataParallel(Host):
    """Train `spec` data-parallel on `pool`: `slices` slices per batch (default: the pool's worker count).

    `train()` runs to the end and returns the loss history; iterate for one dict per step. Follow it live
    with `LossCurve().follow(dp)` (the same event stream a background run has). `memory` (bytes per device)
    refuses a slice whose gradient plan is red there.

    `device` ("reference", default; "wgpu"; "wgpu:N"; part of an adapter's name) is every worker's device,
    or `devices=[...]` one per worker (cycled): on a wgpu device each worker keeps its replica in device
    buffers and runs the step's kernels there; only gradients travel, through the host (pool/devices.py).
    """

    def __init__(self, pool, spec, *, slices: int | None = None, steps: int | None = None, memory: int | None = None,
                 data: dict | None = None, device: str | None = None, devices: list | None = None):
        own_only(pool, "data-parallel training")
        super().__init__(spec, what="data-parallel training", steps=steps, data=data)
        self.pool, self.client = pool, pool.client
        self.workers = pool.workers()
        self.slices = int(slices) if slices is not None else len(self.workers)
        if not 1 <= self.slices <= self.batch_size:
            raise PoolError(f"slices={slices} must be between 1 and the batch size {self.batch_size}",
                            where="DataParallel", hint="give slices=2 for two workers")
        self.sizes = [len(a) for a in np.array_split(np.arange(self.batch_size), self.slices)]
        self.device_names = parse_devices(device, devices, len(self.workers))
        self.on_device = self.device_names[0] != "reference"
        plan_dev = resolve(self.device_names[0]) if self.on_device else "reference"
        self.backend = "wgpu" if self.on_device else "reference"
        p = make_plan(self.spec, plan_dev, batch_size=max(self.sizes), options=gradient_options(self.spec),
                      evaluation=False, fixes=False, memory=memory)
        self.tier, self.plan = p.tier, p
        if memory is not None and _verdict(p.peak_bytes, p.capacity_bytes) == "red":
            raise PoolError(f"a slice of {max(self.sizes)} rows needs {p.peak_bytes} bytes, over the {memory} declared "
                            "per device", where="DataParallel", hint="use more slices (smaller ones)")
        st = _grad_step(self.spec, max(self.sizes), self.tier)
        self.names = list(st.param_names)
        self.shapes = tuple((n, tuple(np.shape(self.init[n]))) for n in self.names)
        replica = ({n: self.init[n] for n in self.names}, self.state0(self.names))
        self.state_names = list(replica[1])
        self.run_id = new_run_id()
        self.replicas = {w: self.client.scatter([replica], workers=[w], broadcast=False, hash=False)[0]   # one future
                         for w in self.workers}
        if self.on_device:              # the replica moves into the worker's device buffers; a token stands for it
            self.replicas = {w: self.client.submit(dev_init, self.run_id, name, rep, workers=[w], pure=False)
                             for (w, rep), name in zip(self.replicas.items(), self.device_names)}
            self.client.gather(list(self.replicas.values()))      # a worker without that device fails here

    def _worker(self, i: int) -> str:
        return self.workers[i % len(self.workers)]

    def gradient(self, x: np.ndarray, y) -> Any:
        """The future of the reduced (loss, gradients) of batch (x, y) at the current weights, on a worker."""
        if len(x) != sum(self.sizes):
            raise PoolError(f"a batch of {len(x)} rows does not match the slices of {sum(self.sizes)}",
                            where="DataParallel.gradient")
        futs, lo = [], 0
        for i, n in enumerate(self.sizes):
            w = self._worker(i)
            part = (x[lo:lo + n], y[lo:lo + n] if y is not None else None)
            if self.on_device:
                futs.append(self.client.submit(dev_slice_gradient, self.run_id, self.spec, self.tier, self.replicas[w],
                                               *part, workers=[w], pure=False))
            else:
                futs.append(self.client.submit(slice_gradient, self.spec, self.tier, self.replicas[w], *part,
                                               workers=[w], pure=False))
            lo += n
        return tree_reduce(self.client, "grad_mean", futs)

    def __iter__(self):
        self.emit({"kind": "state", "state": "running"})
        for x, y in self.batches():
            s = self.step_feeds()
            red = self.gradient(x, y)
            fn = dev_apply_update if self.on_device else apply_update
            head = (self.run_id,) if self.on_device else ()
            self.replicas = {w: self.client.submit(fn, *head, self.spec, self.tier, self.shapes, rep, red, s["lr"],
                                                   s["step"], workers=[w], pure=False)
                             for w, rep in self.replicas.items()}
            loss = self.client.submit(_loss_of, red, pure=False).result()
            self.step += 1
            self.loss_history.append(loss)
            ev = {"kind": "step", "step": self.step, "loss": loss, "lr": s["lr"]}
            self.emit(ev)
            yield ev
        self.emit({"kind": "state", "state": "finished"})

    def train(self) -> list[float]:
        for _ in self:
            pass
        return list(self.loss_history)

    def _replica(self, w: str):
        """The future of worker w's replica as host arrays (read back from its device when it has one)."""
        r = self.replicas[w]
        if not self.on_device:
            return r
        return self.client.submit(dev_replica, self.run_id, r, self.names, self.state_names, workers=[w], pure=False)

    def weights(self) -> dict[str, np.ndarray]:
        """The weights of the first replica (every replica holds the same: `replica_hashes`)."""
        return dict(self._replica(self.workers[0]).result()[0])

    def replica_hashes(self) -> dict[str, str]:
        """Each worker's hash of its replica (weights and optimizer state), computed there."""
        return {w: self.client.submit(_replica_hash, self._replica(w), workers=[w], pure=False).result()
                for w in self.replicas}

    def devices(self) -> dict[str, dict]:
        """What each worker's device name resolved to there (backend, adapter, memory, adapter index)."""
        from .devices import device_info
        return {w: self.client.submit(device_info, n, workers=[w], pure=False).result()
                for w, n in zip(self.workers, self.device_names)}

    def close(self) -> None:
        """Release the workers' device buffers of this run (a run on the reference backend holds none)."""
        if self.on_device:
            self.client.gather([self.client.submit(dev_release, self.run_id, workers=[w], pure=False)
                                for w in self.workers])


def data_parallel(pool, spec, *, on_step: Callable[[dict], None] | None = None, **kw) -> DataParallel:
    """Train `spec` data-parallel on `pool` to the end; `on_step(event)` is called after each step."""
    dp = DataParallel(pool, spec, **kw)
    if on_step is not None:
        dp.subscribe(lambda ev: on_step(ev) if ev.get("kind") == "step" else None)
    dp.train()
    return dp
