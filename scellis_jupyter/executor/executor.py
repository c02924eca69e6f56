"""Run a Program: bind leaves, place every computed value at its planned arena offset, dispatch steps.

Why one executor: eager `.numpy()`, `.backward()` and training steps all come through here, so the
memory the planner predicts is the memory the engine allocates, on every backend.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import determinism
from ..errors import DeviceError
from ..graph.node import Node
from ..program.schedule import Program, compile_program


@dataclass
class Storage:
    """A typed window (shape, dtype) at a byte offset of a backend buffer."""
    backend: Any
    buffer: Any
    offset: int
    shape: tuple
    dtype: object
    nbytes: int

    def sub(self, offset: int, shape, dtype, nbytes: int) -> "Storage":
        return Storage(self.backend, self.buffer, self.offset + offset, tuple(shape), dtype, nbytes)

    def numpy(self):
        return self.backend.to_numpy(self)


def execute(prog: Program, leaves: list[Storage], backend) -> list[Storage]:
    """Dispatch every step of `prog` on `backend`; returns the storages of its outputs."""
    vals = prog.values
    where: dict[int, Storage] = {}
    for li, s in zip(prog.leaves, leaves):
        if s.backend is not backend:
            raise DeviceError(f"a tensor lives on {s.backend.name} but the program runs on {backend.name}",
                              where=f"program {prog.hash[:12]}", hint="move it with .to(device) first")
        where[li] = s
    for b, li in prog.meta.get("donated", {}).items():     # outputs written over their leaf's storage
        where[b] = where[li]
    arena = backend.arena(prog.arena.arena_bytes)
    for p in prog.persistent:
        v = vals[p]
        where[p] = backend.alloc_storage(v.shape, v.dtype, v.nbytes)

    def resolve(i: int) -> Storage:
        s = where.get(i)
        if s is not None:
            return s
        v = vals[i]
        if v.kind == "view":
            src, off = prog.view_base[i]
            base = resolve(src)
            s = base.sub(off, v.shape, v.dtype, v.nbytes)
        else:
            s = Storage(backend, arena, prog.arena.offsets[i], v.shape, v.dtype, v.nbytes)
        where[i] = s
        return s

    roots = list(leaves) + [where[p] for p in prog.persistent] + \
        [Storage(backend, arena, 0, (prog.arena.arena_bytes,), "u8", prog.arena.arena_bytes)]
    try:
        if backend.begin(prog, roots) is not True:       # True: replayed whole from the backend's record
            try:
                for step in prog.steps:
                    v = vals[step]
                    backend.dispatch(v, [resolve(i) for i in v.inputs], resolve(step), prog)
            finally:
                backend.end(prog)
        return [resolve(o) for o in prog.outputs]
    finally:
        where.clear()   # `resolve` refers to itself: without this the cycle keeps every storage until gc


def realize(nodes: list[Node], backend, tier: str | None = None) -> list[Storage]:
    """Compile (or fetch from cache) and run the program computing `nodes`, then make them leaves."""
    todo = [n for n in nodes if not n.realized]
    if todo:
        t, _ = determinism.resolve(tier)
        prog, leaves = compile_program(todo, backend.name, t)
        outs = execute(prog, [l.storage for l in leaves], backend)
        for n, s in zip(todo, outs):
            n.storage = s
            n.tier = t
    return [n.storage for n in nodes]
