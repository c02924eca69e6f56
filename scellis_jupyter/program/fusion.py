"""Elementwise fusion: chains of elementwise ops become one `fused` step (one dispatch, no intermediates).

Why here, on the schedule: the memory plan and the dispatch count both follow the fused schedule, so
what the planner predicts is what the executor runs. A producer joins its consumer's group when it is
elementwise, is not a program output, and every one of its users is already in the group; scalar and
other fills are inlined into every user. Each fused instruction rounds to its own dtype, so a fused
chain gives the same values as the ops run one by one (backends evaluate the same instruction list).
"""
from __future__ import annotations

import os

from ..graph.opset import ELEMENTWISE
from .ir import Value

MAX_INPUTS = 7          # 8 storage bindings per stage (WebGPU default): the output and 7 inputs
MAX_INSTRUCTIONS = 48   # keep generated shaders small and their compile time short


def enabled() -> bool:
    return os.environ.get("SCELLIS_FUSION", "1") not in ("0", "off", "false")


def fusible(v, values) -> bool:
    """Elementwise, single-output, and no i8 operand (i8 has only dedicated cast kernels)."""
    if v.kind != "compute" or isinstance(v.dtype, tuple):
        return False
    if v.op == "fill":
        return True
    if v.op not in ELEMENTWISE or v.dtype == "i8":
        return False
    return not any(values[i].dtype == "i8" for i in v.inputs)


def fuse(values: list, outputs: list[int], keep: set[int] | None = None) -> tuple[list, list[int], dict[int, int]]:
    """Rewrite `values` (in topological order) with fused groups; returns (values, outputs, old->new).

    keep: values that must stay materialized where they are (targets of control inputs: a running
    gradient sum the next micro-batch waits for must not be folded into a kernel at the end).
    """
    n = len(values)
    users: list[set[int]] = [set() for _ in range(n)]
    for i, v in enumerate(values):
        for j in v.inputs:
            users[j].add(i)
    is_out = set(outputs) | set(keep or ())
    absorbed: set[int] = set()
    groups: dict[int, tuple[list, list[int]]] = {}     # root -> (instructions, external inputs)
    group_of: dict[int, int] = {}                       # member (fills included) -> its group's root
    members_of: dict[int, set[int]] = {}

    for root in range(n - 1, -1, -1):
        v = values[root]
        if root in absorbed or not fusible(v, values) or v.op == "fill":
            continue
        members = {root}
        # grow the group: producers whose users all lie inside it (fills always)
        frontier = list(v.inputs)
        while frontier:
            p = frontier.pop()
            if p in members:
                continue
            pv = values[p]
            if not fusible(pv, values) or p in is_out:
                continue
            if pv.op != "fill" and not users[p] <= members:
                continue
            if len(members) >= MAX_INSTRUCTIONS:
                break
            trial = members | {p}
            if len(_externals(values, trial)) > MAX_INPUTS:
                continue
            members = trial
            frontier.extend(pv.inputs)
        if len(members) == 1:
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
            if values[m].op != "fill":
                group_of[m] = root
                if m != root:
                    absorbed.add(m)
    # a fill is dropped only when every user is fused and computes it inline
    for i, v in enumerate(values):
        if v.kind == "compute" and v.op == "fill" and i not in is_out and users[i]:
            if all(u in group_of and i in members_of[group_of[u]] for u in users[i]):
                absorbed.add(i)

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
                       "compute", v.nbytes)
        else:
            nv = Value(v.op, tuple(remap[j] for j in v.inputs), v.attrs, v.shape, v.dtype, v.kind, v.nbytes)
        remap[i] = len(out)
        out.append(nv)
    return out, [remap[o] for o in outputs], remap


def _externals(values, members: set[int]) -> list[int]:
    ext: list[int] = []
    for m in sorted(members):
        for i in values[m].inputs:
            if i not in members and i not in ext:
                ext.append(i)
    return ext

