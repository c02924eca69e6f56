"""The Program IR: values (leaves, computed steps, views) in schedule order, with their arena plan and hash.

Why apart from the compiler: fusion, liveness, the backends and the planner all read this shape, and none
of them should need the compiler that makes it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import dtypes as dt
from .liveness import ArenaPlan, align


@dataclass
class Value:
    op: str
    inputs: tuple[int, ...]
    attrs: dict
    shape: tuple
    dtype: object
    kind: str                   # "leaf" | "compute" | "view"
    nbytes: int = 0
    scope: str = ""             # the layer it was built in ("block3.attn", "block3.attn/bwd", "optimizer")


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
