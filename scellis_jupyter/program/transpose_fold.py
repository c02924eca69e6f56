"""Transpose folding: a permute that swaps the last two axes and is read only by matmuls becomes their
trans_a / trans_b flag, and no copy is made.

Why: a training step transposes weights, activations and gradients for every matmul (y = x W^T,
dW = g^T x, dx = g W), each a dispatch and a temporary, while the matmul kernels read a transposed
operand along its contiguous axis at the same cost. Why here, on the schedule (before fusion): the memory
plan and the dispatch count follow the rewritten schedule, so what the planner predicts is what runs.
A folded matmul computes the same products in the same order as matmul(permute(x)): the reference
backend reads the same contiguous copy (bit for bit), the wgpu kernel the same values from other places.
Off with SCELLIS_FOLD_TRANSPOSE=0 (or SCELLIS_FUSION=0), the switch graph.functional.transposes_fold reads.
"""
from __future__ import annotations

from ..graph.functional import transposes_fold
from .ir import Value

FLAGS = ("trans_a", "trans_b")


def enabled() -> bool:
    return transposes_fold()


def is_swap(v: Value) -> bool:
    """A computed permute of the last two axes, batch axes left in place."""
    nd = len(v.shape) if not isinstance(v.dtype, tuple) else 0
    return (v.kind == "compute" and v.op == "permute" and nd >= 2
            and tuple(v.attrs["perm"]) == tuple(range(nd - 2)) + (nd - 1, nd - 2))


def fold(values: list, outputs: list[int], keep: set[int] | None = None) -> tuple[list, list[int], dict[int, int]]:
    """Rewrite `values` (topological order) with foldable transposes folded; returns (values, outputs,
    old->new), folded permutes absent from the map. A permute folds when it is not an output (nor in
    `keep`) and every user is a matmul (each reads it in one or both operand slots)."""
    n = len(values)
    users: list[list[int]] = [[] for _ in range(n)]
    for i, v in enumerate(values):
        for j in v.inputs:
            users[j].append(i)
    fixed = set(outputs) | set(keep or ())
    folded = {i for i, v in enumerate(values)
              if is_swap(v) and i not in fixed and users[i]
              and all(values[u].op == "matmul" and values[u].kind == "compute" for u in users[i])}
    if not folded:
        return values, outputs, {i: i for i in range(n)}
    remap: dict[int, int] = {}
    out: list = []
    for i, v in enumerate(values):
        if i in folded:
            continue
        ins = list(v.inputs)
        attrs = v.attrs
        if v.op == "matmul" and any(j in folded for j in ins):
            attrs = dict(v.attrs)
            for slot, flag in enumerate(FLAGS):
                if ins[slot] in folded:
                    ins[slot] = values[ins[slot]].inputs[0]
                    attrs[flag] = not attrs.get(flag, False)
                    if not attrs[flag]:
                        del attrs[flag]
        nv = Value(v.op, tuple(remap[j] for j in ins), attrs, v.shape, v.dtype, v.kind, v.nbytes, v.scope)
        remap[i] = len(out)
        out.append(nv)
    return out, [remap[o] for o in outputs], remap
