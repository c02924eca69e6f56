"""Run a Program: bind leaves, place every computed value at its planned arena offset, dispatch steps.

Why one executor: eager `.numpy()`, `.backward()` and training steps all come through here, so the
memory the planner predicts is the memory the engine allocates, on every backend.
"""
from __future__ import annotations

import numpy as np

from .. import determinism
from .. import dtypes as dt
from ..backends.storage import Storage, bind
from ..errors import DeviceError, ScellisError
from ..graph.node import Node
from ..program.schedule import Program, compile_program
from ..program.training import TrainStep


def execute(prog: Program, leaves: list[Storage], backend) -> list[Storage]:
    """Dispatch every step of `prog` on `backend`; returns the storages of its outputs."""
    for s in leaves:
        if s.backend is not backend:
            raise DeviceError(f"a tensor lives on {s.backend.name} but the program runs on {backend.name}",
                              where=f"program {prog.hash[:12]}", hint="move it with .to(device) first")
    quick = getattr(backend, "quick_replay", None)       # a rerun over the same buffers (wgpu): no binding
    if quick is not None:
        outs = quick(prog, leaves)
        if outs is not None:
            return outs
    parts = prog.arena.parts()        # one buffer, or two for a split arena (program/liveness.py)
    arenas = (backend.arena(parts[0]),) if len(parts) == 1 else backend.arenas(*parts)
    persistent = [backend.alloc_storage(prog.values[p].shape, prog.values[p].dtype, prog.values[p].nbytes)
                  for p in prog.persistent]
    resolve, _ = bind(prog, leaves, persistent, backend, arenas)
    roots = list(leaves) + persistent + [Storage(backend, buf, 0, (n,), "u8", n) for buf, n in zip(arenas, parts)]
    if backend.begin(prog, roots) is not True:       # True: replayed whole from the backend's record
        try:
            replay = getattr(backend, "run_steps", None)       # the whole step list at once (reference)
            if replay is None or not replay(prog, resolve):
                for step in prog.steps:
                    v = prog.values[step]
                    backend.dispatch(v, [resolve(i) for i in v.inputs], resolve(step), prog)
        finally:
            backend.end(prog)
    return [resolve(o) for o in prog.outputs]


def realize(nodes: list[Node], backend, tier: str | None = None) -> list[Storage]:
    """Compile (or fetch from cache) and run the program computing `nodes`, then make them leaves."""
    todo = [n for n in nodes if not n.realized]
    if todo:
        t, _ = determinism.resolve(tier)
        prog, leaves = compile_program(todo, getattr(backend, "program_key", backend.name), t)
        outs = execute(prog, [l.storage for l in leaves], backend)
        for n, s in zip(todo, outs):
            n.storage = s
            n.tier = t
    return [n.storage for n in nodes]


def run_numpy(step: TrainStep, feeds: dict, impl) -> dict:
    """Execute one step on numpy inputs named like its leaves; returns every output by name as numpy.

    For tests, benchmarks and notebook pokes; a training loop keeps its storages on the device instead.
    """
    missing = [l.name for l in step.leaves if l.name not in feeds]
    if missing:
        raise ScellisError(f"step inputs missing: {', '.join(missing[:6])}", code="graph", where="run_numpy")
    stor = [impl.from_numpy(np.asarray(feeds[l.name]).astype(dt.to_numpy(l.node.dtype)).reshape(l.node.shape),
                            l.node.dtype) for l in step.leaves]
    outs = execute(step.program, stor, impl)
    return {n: np.array(impl.to_numpy(o)) for n, o in zip(step.outputs, outs)}
