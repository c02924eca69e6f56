"""A short throughput probe of a device: one small training step (two matmuls, relu, backward), timed.

Why: `device("auto")` must pick the faster of a CPU-emulated adapter (Mesa's llvmpipe) and the numpy
reference, and which one is faster depends on the machine (cores, SIMD width, driver version): on a
2-core machine the reference trained cnn_digits in 13 s and llvmpipe in 61 s. Timing a step of the
engine's own kernels through this executor answers it in well under a second; the device module
caches the answer per machine. The probe is registered with backends.device by this package's
__init__ (the device module stands below the executor and cannot import it).
"""
from __future__ import annotations

import time

import numpy as np

from ..graph import functional as F
from ..graph.autodiff import grad
from ..graph.node import Node
from ..program.schedule import compile_program
from .executor import execute

BATCH, WIDTH, OUT = 64, 256, 64


def seconds_per_step(dev, reps: int = 5, budget_s: float = 1.0) -> float:
    """The fastest of up to `reps` timed runs (after one warm-up that compiles the pipelines) of a small MLP
    step's forward and backward on `dev`, read back to the host; seconds."""
    backend = dev.fresh_impl()
    rng = np.random.default_rng(0)

    def leaf(shape) -> Node:
        a = (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)
        return Node("const", (), {}, tuple(shape), "f32", storage=backend.from_numpy(a, "f32"), requires_grad=True)

    x, w1, w2 = leaf((BATCH, WIDTH)), leaf((WIDTH, WIDTH)), leaf((WIDTH, OUT))
    loss = F.sum_(F.relu(F.matmul(F.relu(F.matmul(x, w1)), w2)))
    g1, g2 = grad([loss], [w1, w2])
    prog, leaves = compile_program([loss, g1, g2], getattr(backend, "program_key", backend.name), "fast")
    storages = [n.storage for n in leaves]

    def step() -> None:
        backend.read_many(execute(prog, storages, backend))

    step()
    best, stop = float("inf"), time.perf_counter() + budget_s
    for _ in range(max(1, reps)):
        t = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - t)
        if time.perf_counter() > stop:
            break
    return best
