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


def bind(prog: Program, leaves: list, persistent: list, backend, arena):
    """Where every value of `prog` lives: the given leaf and persistent storages, donated outputs in
    their leaf's storage, views on their base, everything else at its planned arena offset.

    Returns (resolve, where): `resolve(i)` fills `where` on demand. Shared by execution and by a
    backend's dry run (planning), so both place values the same way.
    """
    vals = prog.values
    where: dict[int, Storage] = dict(zip(prog.leaves, leaves))
    where.update(zip(prog.persistent, persistent))
    for b, li in prog.meta.get("donated", {}).items():     # outputs written over their leaf's storage
        where[b] = where[li]

    def resolve(i: int) -> Storage:
        chain = []
        while i not in where and vals[i].kind == "view":
            chain.append(i)
            i = prog.view_base[i][0]
        s = where.get(i)
        if s is None:
            v = vals[i]
            s = where[i] = Storage(backend, arena, prog.arena.offsets[i], v.shape, v.dtype, v.nbytes)
        for j in reversed(chain):        # iterative: a self-referring closure would keep `where` alive
            v = vals[j]
            s = where[j] = s.sub(prog.view_base[j][1], v.shape, v.dtype, v.nbytes)
        return s
    return resolve, where


def execute(prog: Program, leaves: list[Storage], backend) -> list[Storage]:
    """Dispatch every step of `prog` on `backend`; returns the storages of its outputs."""
    for s in leaves:
        if s.backend is not backend:
            raise DeviceError(f"a tensor lives on {s.backend.name} but the program runs on {backend.name}",
                              where=f"program {prog.hash[:12]}", hint="move it with .to(device) first")
    arena = backend.arena(prog.arena.arena_bytes)
    persistent = [backend.alloc_storage(prog.values[p].shape, prog.values[p].dtype, prog.values[p].nbytes)
                  for p in prog.persistent]
    resolve, _ = bind(prog, leaves, persistent, backend, arena)
    roots = list(leaves) + persistent + \
        [Storage(backend, arena, 0, (prog.arena.arena_bytes,), "u8", prog.arena.arena_bytes)]
    if backend.begin(prog, roots) is not True:       # True: replayed whole from the backend's record
        try:
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
        prog, leaves = compile_program(todo, backend.name, t)
        outs = execute(prog, [l.storage for l in leaves], backend)
        for n, s in zip(todo, outs):
            n.storage = s
            n.tier = t
    return [n.storage for n in nodes]
