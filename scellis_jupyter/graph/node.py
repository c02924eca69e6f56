"""Graph nodes: one typed value each (op, inputs, attrs, shape, dtype), built lazily.

Why: everything (eager pokes, training steps, the planner) goes through one IR, so a Node carries no
data until it is realized; a realized node keeps its inputs for autodiff but is a leaf for later programs.
"""
from __future__ import annotations

import contextvars
import itertools
from typing import Any

_ids = itertools.count()
# the layer (spec node key) whose forward is being built; a node records it at creation, so a profile can say
# which layer a kernel came from ("block3.attn"); backward nodes get "<layer>/bwd" (graph.autodiff)
_SCOPE: contextvars.ContextVar[str] = contextvars.ContextVar("scellis_scope", default="")


class scope:
    """`with scope("block3.attn"):` labels every node made inside it (nesting replaces, not joins: spec
    node keys are already full paths)."""

    def __init__(self, name: str):
        self.name = name

    def __enter__(self) -> "scope":
        self._tok = _SCOPE.set(self.name)
        return self

    def __exit__(self, *exc) -> None:
        _SCOPE.reset(self._tok)


def current_scope() -> str:
    return _SCOPE.get()


def freeze(v: Any) -> Any:
    """Make attrs hashable and canonical (lists -> tuples, dicts -> sorted tuples)."""
    if isinstance(v, (list, tuple)):
        return tuple(freeze(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, freeze(x)) for k, x in v.items()))
    return v


class Node:
    __slots__ = ("id", "op", "inputs", "attrs", "shape", "dtype", "storage", "requires_grad", "grad",
                 "name", "tier", "after", "scope", "__weakref__")

    def __init__(self, op: str, inputs: tuple, attrs: dict, shape, dtype, *, storage=None,
                 requires_grad: bool = False, name: str | None = None):
        self.id = next(_ids)
        self.op = op
        self.inputs = tuple(inputs)
        self.attrs = {k: freeze(v) for k, v in attrs.items()}
        self.shape = shape          # tuple of ints, or a tuple of shapes for multi-output nodes
        self.dtype = dtype          # str, or a tuple of str for multi-output nodes
        self.storage = storage      # backend Storage once realized (leaves: always)
        self.requires_grad = requires_grad
        self.grad = None            # Node of the accumulated gradient (leaves that require grad)
        self.name = name
        self.tier = None            # determinism tier of the program that realized it
        self.after = ()             # control inputs: scheduled before this node, no data flows (recompute)
        self.scope = _SCOPE.get()   # the layer being built when this node was made ("" outside any)

    @property
    def multi(self) -> bool:
        return isinstance(self.dtype, tuple)

    @property
    def realized(self) -> bool:
        return self.storage is not None

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def attr_key(self) -> tuple:
        return tuple(sorted(self.attrs.items()))

    def __repr__(self) -> str:
        return f"Node#{self.id}({self.op}, shape={self.shape}, dtype={self.dtype})"


def toposort(outputs: list[Node], cut_realized: bool = True) -> list[Node]:
    """Nodes reachable from outputs, inputs before users; realized nodes are leaves when cut_realized."""
    order: list[Node] = []
    seen: set[int] = set()
    stack = [(n, False) for n in reversed(outputs)]
    while stack:
        n, done = stack.pop()
        if done:
            order.append(n)
            continue
        if n.id in seen:
            continue
        seen.add(n.id)
        stack.append((n, True))
        if not (cut_realized and n.realized):
            for i in reversed(n.inputs):
                if i.id not in seen:
                    stack.append((i, False))
            for i in n.after:               # visited first: everything they need is scheduled earlier
                if i.id not in seen:
                    stack.append((i, False))
    return order
