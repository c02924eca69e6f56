"""Run what a plan planned on a fresh backend and measure its peak three ways.

Why fresh: a backend reused across programs keeps a grown arena and pooled buffers; a clean one
shows exactly what this run allocates. Why three ways: the backend's own counter is the allocator
checking itself; the independent measures are what the device was really asked for (every wgpu
`create_buffer`, counted by wrapping the device's method) and, on the numpy reference, the host's real
peak (tracemalloc), which also sees numpy's temporaries inside kernels: the plan bounds those apart
(`extras["host temporaries bound"]`), since they are host memory the kernels free before returning.
"""
from __future__ import annotations

import tracemalloc
import weakref

import numpy as np

from ..backends.device import Device
from ..backends.device import device as pick
from ..program.evaluation import eval_programs
from .executor import execute


class _BufferCounter:
    """Wraps a wgpu device's create_buffer: live bytes asked for (released when a buffer is collected)."""

    def __init__(self, device):
        self.live = self.peak = 0
        self._create = device.create_buffer
        device.create_buffer = self

    def __call__(self, *a, **kw):
        b = self._create(*a, **kw)
        n = int(kw["size"] if "size" in kw else a[1])
        self.live += n
        self.peak = max(self.peak, self.live)
        weakref.finalize(b, self._gone, n)
        return b

    def _gone(self, n: int) -> None:
        self.live -= n


def _feed(leaf_like, name: str, role: str, examples: dict, classes, rng) -> np.ndarray:
    shape, dtype = tuple(leaf_like.shape), leaf_like.dtype
    if name in examples:           # drawn for the step's batch; an evaluation batch takes its first rows
        a = np.asarray(examples[name](rng))
        a = a.reshape(shape) if a.size == int(np.prod(shape)) else a.reshape((-1,) + shape[1:])[:shape[0]]
    elif role in ("parameter", "master_weights"):
        a = (rng.standard_normal(shape) * 0.05).astype(np.float32)
    elif name == "lr":
        a = np.asarray(1e-3, np.float32)
    elif name == "step":
        a = np.asarray(1.0, np.float32)
    elif name == "loss_scale":
        a = np.asarray(1024.0, np.float32)
    elif name.startswith("rng:"):
        a = np.zeros(2, np.uint32)
    elif dtype == "i32":
        a = rng.integers(0, int(classes or 2), size=shape).astype(np.int32)
    elif role == "optimizer_state":
        a = np.zeros(shape, np.int8 if dtype == "i8" else np.float32)
    else:
        a = rng.standard_normal(shape).astype(np.float32)
    return a.astype(np.float16) if dtype == "f16" else a


def measure_step(plan, device=None, host: bool | None = None) -> dict:
    """Run what `plan` planned once on a fresh backend, in the order a Run does it: the step and its loss
    readback, each evaluation Program the plan planned (its x and y uploaded, outputs read back), a step
    after them when the run evaluates between steps, and the readback of its largest tensor.

    Returns measured_peak_bytes (the backend's counter), device_buffer_peak_bytes (wgpu: what
    create_buffer was asked for), host_peak_bytes (reference, when `host`, default on the reference:
    tracemalloc's peak above what existed before), step_peak_bytes, the loss, and the ratio."""
    step = plan.step
    dev = device if isinstance(device, Device) else pick(device or plan.backend)
    be = dev.fresh_impl()
    on_ref = dev.backend == "reference"
    host = on_ref if host is None else host
    rng = np.random.default_rng(0)
    examples = step.info.get("examples", {})     # valid targets and regularizer inputs, as the step declares
    classes = step.info.get("classes")
    arrays = [_feed(l.node, l.name, l.role, examples, classes, rng) for l in step.leaves]
    ev = plan.evaluation
    evals = eval_programs(plan.spec_obj, step, dev.backend, plan.tier, ev) if ev is not None else []
    eval_arrays = []
    for e in evals:
        prog = e.program
        eval_arrays.append({name: _feed(prog.values[prog.leaves[j]], name, "data",
                                        {"y": examples["y"]} if "y" in examples else {}, classes, rng)
                            for j, name in enumerate(e.order) if name in ("x", "y")})
    counter = None if on_ref else _BufferCounter(be.device)
    if host:
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
    try:
        storages = [be.from_numpy(a, l.node.dtype) for a, l in zip(arrays, step.leaves)]
        by_name = {l.name: s for l, s in zip(step.leaves, storages)}
        loss = _run_step(step, storages, be)
        step_peak = int(be.peak)
        for e, feeds in zip(evals, eval_arrays):
            prog = e.program
            ins = [be.from_numpy(feeds[n][:prog.values[prog.leaves[j]].shape[0]].reshape(prog.values[prog.leaves[j]].shape),
                                 prog.values[prog.leaves[j]].dtype) if n in ("x", "y") else by_name[n]
                   for j, n in enumerate(e.order)]
            be.read_many(execute(prog, ins, be))
            del ins
        if evals and ev["in_loop"]:
            _run_step(step, storages, be)
        big = [s for l, s in zip(step.leaves, storages)
               if l.role in ("parameter", "master_weights", "optimizer_state", "buffer")]
        if big:
            be.to_numpy(max(big, key=lambda s: s.nbytes))
        host_peak = tracemalloc.get_traced_memory()[1] - base if host else None
    finally:
        if host:
            tracemalloc.stop()
    out = {"measured_peak_bytes": int(be.peak), "predicted_peak_bytes": int(plan.peak_bytes), "loss": loss,
           "step_peak_bytes": step_peak, "ratio": be.peak / max(plan.peak_bytes, 1)}
    if counter is not None:
        out["device_buffer_peak_bytes"] = counter.peak
    if host_peak is not None:
        out["host_peak_bytes"] = int(host_peak)
    return out


def _run_step(step, storages, be) -> float:
    """One step with its loss (and finite flag) read back in one round trip, outputs then released."""
    outs = execute(step.program, storages, be)
    read = [outs[i] for i, n in enumerate(step.outputs) if n in ("loss", "finite")][:2]
    got = be.read_many(read)
    return float(got[0])
