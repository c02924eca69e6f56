"""Multi-tensor batching: independent fused steps running the same instruction list on different tensors
(the optimizer's update of each parameter) are scheduled side by side and marked as one batch, which a
backend may run as one dispatch (wgpu: kernels/fused_multi.wgsl) or one by one (the reference path).

Why on the schedule: the steps of a batch must be adjacent for a backend to see them together, and the
memory plan must be the liveness of the schedule that runs; so batches are formed here, before the arena
is planned. A member only moves earlier (to its batch's first member), and only when all its inputs are
computed by then; a move that would let an in-place update overwrite a leaf another step still reads
is not made. Each element gets the same instructions either way, so results do not depend on batching.
"""
from __future__ import annotations

import math

from .. import settings

MIN_MEMBERS = 2


def enabled() -> bool:
    return settings.flag("SCELLIS_MULTI_TENSOR")


def _squeezed(shape) -> tuple:
    return tuple(int(d) for d in shape if d != 1)


def signature(v, values):
    """What members of one batch share: the instruction list (shapes aside), operand dtypes, and for each
    input whether it is read elementwise (same elements as the output) or as one scalar; None when the
    step is not batchable (not a fused group, or an input broadcast other than from a scalar)."""
    if v.kind != "compute" or v.op != "fused" or isinstance(v.dtype, tuple):
        return None
    n = math.prod(v.shape)
    kinds = []
    for i in v.inputs:
        s = values[i].shape
        if math.prod(s) == 1:
            kinds.append("s")
        elif _squeezed(s) == _squeezed(v.shape):
            kinds.append("e")
        else:
            return None
    if n == 0:
        return None
    code = tuple((op, attrs, args, dtype) for op, attrs, args, _shape, dtype in v.attrs["code"])
    return code, tuple(kinds), tuple(values[i].dtype for i in v.inputs), v.dtype


def batch(values, steps: list[int], base, reads_done) -> list[int]:
    """`steps` with batchable fused steps moved next to the first of their kind, each batch marked in its
    members' attrs as `batch = (k, n)`; `reads_done(step)` tells whether an in-place step still runs after
    every other reader of the leaf it overwrites (checked again after the moves: if any fails, nothing is
    moved)."""
    buckets: dict = {}
    for s in steps:
        sig = signature(values[s], values)
        if sig is not None:
            buckets.setdefault(sig, []).append(s)
    groups = [m for m in buckets.values() if len(m) >= MIN_MEMBERS]
    if not groups:
        return steps
    order = list(steps)
    formed = []
    for members in sorted(groups, key=lambda m: steps.index(m[0])):
        pos = {s: t for t, s in enumerate(order)}
        t0 = pos[members[0]]
        take = [members[0]]
        for b in members[1:]:
            if all(values[base(i)].kind != "compute" or pos[base(i)] < t0 for i in values[b].inputs):
                take.append(b)
        if len(take) < MIN_MEMBERS:
            continue
        moved = set(take)
        rest = [s for s in order if s not in moved]
        order = rest[:t0] + take + rest[t0:]      # every step before the anchor stays before it
        formed.append(take)
    if not formed or not reads_done(order):
        return steps
    for take in formed:
        for k, s in enumerate(take):
            values[s].attrs = dict(values[s].attrs, batch=(k, len(take)))
    return order
