"""Elementwise fusion: chains of elementwise ops become one `fused` step (one dispatch, no intermediates).

Why here, on the schedule: the memory plan and the dispatch count both follow the fused schedule, so
what the planner predicts is what the executor runs. A producer joins its consumer's group when it is
elementwise, is not a program output, and every one of its users is already in the group; scalar and
other fills are inlined into every user. So are scalar chains (an optimizer's bias corrections, a
clipping coefficient): recomputing a one-element value in every kernel that reads it costs nothing,
while materializing it costs a dispatch each. Each fused instruction rounds to its own dtype, so a fused
chain gives the same values as the ops run one by one (backends evaluate the same instruction list).
"""
from __future__ import annotations

from .. import settings
from ..graph.opset import ELEMENTWISE
from .ir import Value

MAX_INPUTS = 7          # 8 storage bindings per stage (WebGPU default): the output and 7 inputs
MAX_INSTRUCTIONS = 48   # keep generated shaders small and their compile time short


def enabled() -> bool:
    return settings.flag("SCELLIS_FUSION")


def fusible(v, values) -> bool:
    """Elementwise, single-output, and no i8 operand (i8 has only dedicated cast kernels)."""
    if v.kind != "compute" or isinstance(v.dtype, tuple):
        return False
    if v.op == "fill":
        return True
    if v.op not in ELEMENTWISE or v.dtype == "i8":
        return False
    return not any(values[i].dtype == "i8" for i in v.inputs)


def cheap(v, values) -> bool:
    """A value every fused user may recompute inline: a fill, or a one-element elementwise result."""
    if not fusible(v, values):
        return False
    if v.op == "fill":
        return True
    n = 1
    for d in v.shape:
        n *= int(d)
    return n == 1


def _kept_cast(v, values, kept: set[int]) -> tuple | None:
    """(source dtype, dtype) of a cast of a value that is stored anyway, a leaf or a program output (a
    mixed-precision step casts each updated f32 master parameter to the f16 copy the next step reads), else
    None."""
    if v.kind == "compute" and v.op == "cast":
        src = v.inputs[0]
        if values[src].kind != "compute" or src in kept:
            return values[src].dtype, v.dtype
    return None


def fuse(values: list, outputs: list[int], keep: set[int] | None = None,
         lone_casts: bool = False) -> tuple[list, list[int], dict[int, int]]:
    """Rewrite `values` (in topological order) with fused groups; returns (values, outputs, old->new).

    keep: values that must stay materialized where they are (targets of control inputs: a running
    gradient sum the next micro-batch waits for must not be folded into a kernel at the end).
    lone_casts: a cast of a leaf or of an output that joins nothing still becomes a one-instruction group
    where another such value is cast the same way, so program/batching.py can run them all as one dispatch
    (a mixed-precision step casts every updated parameter: 102 dispatches of a 6-block GPT).
    """
    n = len(values)
    is_out = set(outputs) | set(keep or ())
    casts: dict = {}
    if lone_casts:
        for v in values:
            kind = _kept_cast(v, values, is_out)
            if kind is not None and fusible(v, values):
                casts[kind] = casts.get(kind, 0) + 1
    users: list[set[int]] = [set() for _ in range(n)]
    for i, v in enumerate(values):
        for j in v.inputs:
            users[j].add(i)
    absorbed: set[int] = set()
    groups: dict[int, tuple[list, list[int]]] = {}     # root -> (instructions, external inputs)
    members_of: dict[int, set[int]] = {}

    is_cheap = [cheap(v, values) for v in values]
    for root in range(n - 1, -1, -1):
        v = values[root]
        if root in absorbed or not fusible(v, values) or v.op == "fill":
            continue
        members = {root}
        # grow the group: producers whose users all lie inside it (fills and scalar chains always)
        frontier = list(v.inputs)
        while frontier:
            p = frontier.pop()
            if p in members:
                continue
            pv = values[p]
            if not fusible(pv, values) or p in is_out:
                continue
            if not is_cheap[p] and not users[p] <= members:
                continue
            if len(members) >= MAX_INSTRUCTIONS:
                break
            trial = members | {p}
            if is_cheap[p]:       # a scalar chain whole (its inputs are mostly shared leaves: lr, step)
                cone = _cheap_cone(values, p, is_cheap, is_out)
                if len(members) + len(cone) <= MAX_INSTRUCTIONS and \
                        len(_externals(values, members | cone)) <= MAX_INPUTS:
                    members = members | cone
                    frontier.extend(i for c in cone for i in values[c].inputs)
                    continue
            if len(_externals(values, trial)) > MAX_INPUTS:
                continue
            members = trial
            frontier.extend(pv.inputs)
        if len(members) == 1 and casts.get(_kept_cast(v, values, is_out), 0) < 2:
            continue
        order = sorted(members)                         # topological: indices are already in order
        ext = _externals(values, members)
        slot = {e: k for k, e in enumerate(ext)}
        pos: dict[int, int] = {}
        code = []
        for m in order:
            mv = values[m]
            args = tuple(("t", pos[i]) if i in members else ("in", slot[i]) for i in mv.inputs)
            pos[m] = len(code)
            code.append((mv.op, tuple(sorted(mv.attrs.items())), args, mv.shape, mv.dtype))
        groups[root] = (code, ext)
        members_of[root] = members
        for m in members:
            if not is_cheap[m] and m != root:     # cheap members may sit in several groups: decided below
                absorbed.add(m)
    # a cheap value (fill, scalar chain) stays materialized only where something kept reads it directly:
    # a kept step's inputs, or the external inputs of a kept group, swept from the outputs backwards
    need = set(is_out)
    for i in range(n - 1, -1, -1):
        v = values[i]
        if v.kind == "compute" and is_cheap[i] and i not in need:
            absorbed.add(i)
            continue
        if i in absorbed:
            continue
        need.update(groups[i][1] if i in groups else v.inputs)

    if not groups:
        return values, outputs, {i: i for i in range(n)}
    remap: dict[int, int] = {}
    out: list = []
    for i, v in enumerate(values):
        if i in absorbed:
            continue
        if i in groups:
            code, ext = groups[i]
            nv = Value("fused", tuple(remap[e] for e in ext), {"code": tuple(code)}, v.shape, v.dtype,
                       "compute", v.nbytes, v.scope)
        else:
            nv = Value(v.op, tuple(remap[j] for j in v.inputs), v.attrs, v.shape, v.dtype, v.kind, v.nbytes, v.scope)
        remap[i] = len(out)
        out.append(nv)
    return out, [remap[o] for o in outputs], remap


def _cheap_cone(values, p: int, is_cheap: list, is_out: set) -> set[int]:
    """p and every cheap value it is computed from through cheap values (not outputs)."""
    cone, todo = set(), [p]
    while todo:
        q = todo.pop()
        if q in cone or not is_cheap[q] or q in is_out:
            continue
        cone.add(q)
        todo.extend(values[q].inputs)
    return cone


def _externals(values, members: set[int]) -> list[int]:
    ext: list[int] = []
    for m in sorted(members):
        for i in values[m].inputs:
            if i not in members and i not in ext:
                ext.append(i)
    return ext

