"""Compile output nodes into a Program: a schedule of primitive steps, views, and an arena plan.

Why: one Program per (graph structure, shapes, dtypes, tier, backend), keyed by a content hash, so a
training loop or a repeated notebook poke compiles once and then only binds new leaf data.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import blake3

from .. import dtypes as dt
from ..graph.node import Node, toposort
from . import fusion
from .liveness import ArenaPlan, align, plan_arena

VIEW_OPS = ("reshape", "item")


@dataclass
class Value:
    op: str
    inputs: tuple[int, ...]
    attrs: dict
    shape: tuple
    dtype: object
    kind: str                   # "leaf" | "compute" | "view"
    nbytes: int = 0


@dataclass
class Program:
    values: list[Value]
    leaves: list[int]
    outputs: list[int]
    steps: list[int]
    arena: ArenaPlan
    persistent: list[int]                       # computed bases of outputs: their own allocations
    view_base: dict[int, tuple[int, int]]       # view value -> (base value, byte offset)
    hash: str
    tier: str
    backend: str
    meta: dict = field(default_factory=dict)

    @property
    def persistent_bytes(self) -> int:
        return sum(align(self.values[v].nbytes) for v in self.persistent)

    def base_of(self, v: int) -> tuple[int, int]:
        off = 0
        while v in self.view_base:
            v, o = self.view_base[v]
            off += o
        return v, off


def value_nbytes(shape, dtype) -> int:
    if isinstance(dtype, tuple):
        return sum(align(dt.nbytes(s, d)) for s, d in zip(shape, dtype))
    return dt.nbytes(shape, dtype)


def multi_offset(shape, dtype, index: int) -> int:
    return sum(align(dt.nbytes(s, d)) for s, d in zip(shape[:index], dtype[:index]))


_CACHE: dict[tuple, Program] = {}


def compile_program(outputs: list[Node], backend: str, tier: str) -> tuple[Program, list[Node]]:
    """Schedule `outputs`; returns the (cached) Program and the leaf nodes to bind, in leaf order."""
    order = toposort(outputs, cut_realized=True)
    index: dict[int, int] = {}
    values: list[Value] = []
    leaves: list[Node] = []
    h = blake3.blake3()
    for n in order:
        ins = tuple(index[i.id] for i in n.inputs) if not n.realized else ()
        if n.realized:
            kind = "leaf"
            leaves.append(n)
        elif n.op in VIEW_OPS:
            kind = "view"
        else:
            kind = "compute"
        v = Value(n.op if kind != "leaf" else "leaf", ins, dict(n.attrs) if kind != "leaf" else {},
                  tuple(n.shape), n.dtype, kind, value_nbytes(n.shape, n.dtype))
        index[n.id] = len(values)
        values.append(v)
        h.update(repr((v.op, v.inputs, sorted(v.attrs.items()), v.shape, v.dtype, v.kind)).encode())
    out_idx = [index[o.id] for o in outputs]
    fuse = fusion.enabled()
    h.update(repr(("out", out_idx, backend, tier, fuse)).encode())
    key = h.hexdigest()
    cached = _CACHE.get(key)
    if cached is not None:
        return cached, leaves
    leaf_idx = [index[l.id] for l in leaves]
    if fuse:
        values, out_idx, remap = fusion.fuse(values, out_idx)
        leaf_idx = [remap[i] for i in leaf_idx]

    view_base: dict[int, tuple[int, int]] = {}
    for i, v in enumerate(values):
        if v.kind == "view":
            src = v.inputs[0]
            off = multi_offset(values[src].shape, values[src].dtype, v.attrs["index"]) if v.op == "item" else 0
            view_base[i] = (src, off)

    def base(i):
        while i in view_base:
            i = view_base[i][0]
        return i

    steps = [i for i, v in enumerate(values) if v.kind == "compute"]
    pos = {v: t for t, v in enumerate(steps)}
    persistent = sorted({base(o) for o in out_idx if values[base(o)].kind == "compute"})
    last_use: dict[int, int] = {}
    for t, s in enumerate(steps):
        for i in values[s].inputs:
            b = base(i)
            if values[b].kind == "compute":
                last_use[b] = max(last_use.get(b, -1), t)
    sizes, lifetimes = {}, {}
    for s in steps:
        if s in persistent:
            continue
        sizes[s] = values[s].nbytes
        lifetimes[s] = (pos[s], max(last_use.get(s, pos[s]), pos[s]))
    prog = Program(values, leaf_idx, out_idx, steps, plan_arena(sizes, lifetimes),
                   persistent, view_base, key, tier, backend)
    _CACHE[key] = prog
    return prog, leaves


def clear_cache() -> None:
    _CACHE.clear()
