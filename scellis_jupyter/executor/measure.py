"""Run one planned training step on a fresh backend and read the engine's own allocation peak.

Why fresh: a backend reused across programs keeps a grown arena and pooled buffers; a clean one
shows exactly what this step allocates, which is what the plan predicted (both go in run records).
"""
from __future__ import annotations

import numpy as np

from ..backends.device import Device
from ..backends.device import device as pick
from .executor import execute


def measure_step(plan, device=None) -> dict:
    """Execute `plan.step` once with synthetic inputs; returns measured peak and the loss."""
    step = plan.step
    dev = device if isinstance(device, Device) else pick(device or plan.backend)
    be = dev.fresh_impl()
    rng = np.random.default_rng(0)
    storages = []
    examples = step.info.get("examples", {})     # valid targets and regularizer inputs, as the step declares
    for leaf in step.leaves:
        n = leaf.node
        shape, dtype = tuple(n.shape), n.dtype
        if leaf.name in examples:
            a = np.asarray(examples[leaf.name](rng)).reshape(shape)
        elif leaf.role in ("parameter", "master_weights"):
            a = (rng.standard_normal(shape) * 0.05).astype(np.float32)
        elif leaf.name == "lr":
            a = np.asarray(1e-3, np.float32)
        elif leaf.name == "step":
            a = np.asarray(1.0, np.float32)
        elif leaf.name == "loss_scale":
            a = np.asarray(1024.0, np.float32)
        elif leaf.name.startswith("rng:"):
            a = np.zeros(2, np.uint32)
        elif dtype == "i32":
            hi = int(step.info.get("classes") or 2)
            a = rng.integers(0, hi, size=shape).astype(np.int32)
        elif leaf.role == "optimizer_state":
            a = np.zeros(shape, np.int8 if dtype == "i8" else np.float32)
        else:
            a = rng.standard_normal(shape).astype(np.float32)
        storages.append(be.from_numpy(a.astype(np.float16) if dtype == "f16" else a, dtype))
    outs = execute(step.program, storages, be)
    loss = float(be.to_numpy(outs[0]))
    return {"measured_peak_bytes": int(be.peak), "predicted_peak_bytes": int(plan.peak_bytes), "loss": loss,
            "ratio": be.peak / max(plan.peak_bytes, 1)}
