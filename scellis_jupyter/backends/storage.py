"""Storage windows and the placement of a Program's values on a backend's buffers.

Why in backends: a backend allocates and reads storages and its dry run (planning) places values exactly as
execution does, so both the executor and the planner stand on this, not on each other.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import DeviceError
from ..program.schedule import Program


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


def bind(prog: Program, leaves: list, persistent: list, backend, arenas: tuple):
    """Where every value of `prog` lives: the given leaf and persistent storages, donated outputs in
    their leaf's storage, views on their base, everything else at its planned arena offset.

    Returns (resolve, where): `resolve(i)` fills `where` on demand. Shared by execution and by a
    backend's dry run (planning), so both place values the same way. `arenas`: the arena's buffers, one for each
    of `prog.arena.parts()` (a split arena's second holds the values at offsets from the split on, liveness.py).
    """
    vals = prog.values
    split = prog.arena.split
    if len(arenas) != len(prog.arena.parts()):
        raise DeviceError(f"{len(arenas)} arena buffers bound for a plan of {len(prog.arena.parts())}",
                          where=f"program {prog.hash[:12]}", hint="engine bug")

    def place(off: int):
        return (arenas[1], off - split) if split and off >= split else (arenas[0], off)
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
            buf, off = place(prog.arena.offsets[i])
            s = where[i] = Storage(backend, buf, off, v.shape, v.dtype, v.nbytes)
        for j in reversed(chain):        # iterative: a self-referring closure would keep `where` alive
            v = vals[j]
            s = where[j] = s.sub(prog.view_base[j][1], v.shape, v.dtype, v.nbytes)
        return s
    return resolve, where
