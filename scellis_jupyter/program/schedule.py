"""Compile output nodes into a Program: a schedule of primitive steps, views, and an arena plan.

Why: one Program per (graph structure, shapes, dtypes, tier, backend), keyed by a content hash, so a
training loop or a repeated notebook poke compiles once and then only binds new leaf data.
"""
from __future__ import annotations

import math

import blake3

from .. import settings
from ..errors import GraphError
from ..graph.node import Node, toposort
from ..graph.opset import ELEMENTWISE
from . import batching, epilogue, fusion, transpose_fold
from .ir import Program, Value, multi_offset, value_nbytes  # noqa: F401 - Program is imported from here too
from .liveness import plan_arena

VIEW_OPS = ("reshape", "item")


_CACHE: dict[tuple, Program] = {}


def is_leaf(n: Node) -> bool:
    return n.realized or n.op == "placeholder"


def compile_program(outputs: list[Node], backend: str, tier: str, donate: dict[int, Node] | None = None,
                    return_index: bool = False):
    """Schedule `outputs`; returns the (cached) Program and the leaf nodes to bind, in leaf order.

    donate: output position -> leaf node whose storage that output overwrites (an optimizer writing
    new weights into the old ones). Honoured when safe: the producing step is elementwise, reads the
    leaf only at its own index, and can run after every other reader of the leaf; otherwise the
    output gets its own allocation (Program.donated says which were honoured).
    return_index: also return {node id: value index} for this graph (the planner's role lookup).
    """
    order = toposort(outputs, cut_realized=True)
    index: dict[int, int] = {}
    values: list[Value] = []
    leaves: list[Node] = []
    h = blake3.blake3()
    for n in order:
        leaf = is_leaf(n)
        ins = tuple(index[i.id] for i in n.inputs) if not leaf else ()
        if leaf:
            kind = "leaf"
            leaves.append(n)
        elif n.op in VIEW_OPS:
            kind = "view"
        else:
            kind = "compute"
        v = Value(n.op if kind != "leaf" else "leaf", ins, dict(n.attrs) if kind != "leaf" else {},
                  tuple(n.shape), n.dtype, kind, value_nbytes(n.shape, n.dtype), n.scope if kind != "leaf" else "")
        index[n.id] = len(values)
        values.append(v)
        # the scope is in the hash (when there is one): a cached Program names the layers of its own graph
        h.update(repr((v.op, v.inputs, sorted(v.attrs.items()), v.shape, v.dtype, v.kind)
                      + ((v.scope,) if v.scope else ())).encode())
    out_idx = [index[o.id] for o in outputs]
    fuse = fusion.enabled()
    want_donate = sorted((int(k), index[l.id]) for k, l in (donate or {}).items())
    for k, li in want_donate:
        if values[li].kind != "leaf":
            raise GraphError(f"output {k} can only be donated into a leaf", where="compile_program")
    gates = {index[a.id] for n in order for a in n.after if a.id in index}   # control-input targets
    multi = fuse and batching.enabled()
    epi = fuse and epilogue.enabled()
    fold = transpose_fold.enabled()
    h.update(repr(("out", out_idx, backend, tier, fuse, want_donate, sorted(gates), multi, fold)).encode())
    if epi:
        h.update(b"epilogue")
    split = split_enabled(backend)
    if split:
        h.update(b"arena-split")
    key = h.hexdigest()
    cached = _CACHE.get(key)
    if cached is not None:
        return (cached, leaves, _node_index(index, cached)) if return_index else (cached, leaves)
    leaf_idx = [index[l.id] for l in leaves]
    remap = {i: i for i in range(len(values))}
    if fold:      # before fusion: a permute read only by matmuls becomes their trans flag
        values, out_idx, remap = transpose_fold.fold(values, out_idx, keep=gates)
        gates = {remap[g] for g in gates}
        leaf_idx = [remap[i] for i in leaf_idx]
    if fuse:
        values, out_idx, remap2 = fusion.fuse(values, out_idx, keep=gates, lone_casts=multi)
        remap = {i: remap2[j] for i, j in remap.items() if j in remap2}
        leaf_idx = [remap2[i] for i in leaf_idx]
        gates = {remap2[g] for g in gates if g in remap2}
    if epi:     # matmul epilogues, on the fused schedule (gates kept where fusion kept them)
        values, out_idx, remap2 = epilogue.absorb(values, out_idx, keep=gates)
        leaf_idx = [remap2[i] for i in leaf_idx]
        remap = {i: remap2[j] for i, j in remap.items() if j in remap2}

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
    donated = _donations(values, steps, out_idx, [(k, remap[li]) for k, li in want_donate], base)
    if donated:
        steps = _donors_last(values, steps, set(donated))
        for b, li in list(donated.items()):
            if not _reads_done(values, steps, b, li, base):
                del donated[b]
    if multi:
        steps = batching.batch(values, steps, base,
                               lambda order: all(_reads_done(values, order, b, li, base) for b, li in donated.items()))
    pos = {v: t for t, v in enumerate(steps)}
    persistent = sorted({base(o) for o in out_idx if values[base(o)].kind == "compute"} - set(donated))
    last_use: dict[int, int] = {}
    for t, s in enumerate(steps):
        for i in values[s].inputs:
            b = base(i)
            if values[b].kind == "compute":
                last_use[b] = max(last_use.get(b, -1), t)
    sizes, lifetimes = {}, {}
    for s in steps:
        if s in persistent or s in donated:      # own storage, or its leaf's: not in the arena
            continue
        sizes[s] = values[s].nbytes
        lifetimes[s] = (pos[s], max(last_use.get(s, pos[s]), pos[s]))
    apart = _products_apart(values, steps, base) if split else None
    prog = Program(values, leaf_idx, out_idx, steps, plan_arena(sizes, lifetimes, apart),
                   persistent, view_base, key, tier, backend,
                   meta={"remap": remap, "donated": donated})
    _CACHE[key] = prog
    return (prog, leaves, _node_index(index, prog)) if return_index else (prog, leaves)


def split_enabled(backend: str) -> bool:
    """Whether programs for `backend` plan a split arena (SCELLIS_ARENA_SPLIT, liveness.py): on wgpu only, where a
    matmul's operands bind read-only when no binding it writes lies in their buffer."""
    return backend.split("+")[0] == "wgpu" and settings.flag("SCELLIS_ARENA_SPLIT")


def _products_apart(values, steps, base) -> list:
    """[(weight, outputs, operands)] of the schedule's products for plan_arena, weight their multiply-adds: a matmul
    (and its epilogue's other inputs, which the kernel binds writable) apart from A and B; attention's output apart
    from q, k, v (its score path multiplies P by v into it), its backward's apart from q, k, v and the output's
    gradient (dq, dk, dv are products of scores with k, q and dout)."""
    out = []
    for s in steps:
        v = values[s]
        if v.op in ("attention", "attention_bwd"):
            q, k = values[v.inputs[0]].shape, values[v.inputs[1]].shape
            weight = math.prod(q) * (k[-2] if len(k) >= 2 else 1)
            ops = v.inputs[:3] + (v.inputs[5:6] if v.op == "attention_bwd" else ())
            out.append((weight, [s], [base(i) for i in ops]))
            continue
        if v.op not in ("matmul", "matmul_fused"):
            continue
        a, b = v.inputs[0], v.inputs[1]
        fused = v.op == "matmul_fused"
        ta = v.attrs["trans"][0] if fused else v.attrs.get("trans_a", False)
        k = values[a].shape[-2] if ta else values[a].shape[-1]
        weight = k * math.prod(v.attrs["mm"][0] if fused else v.shape)
        out.append((weight, [s] + [base(i) for i in v.inputs[2:]], [base(a), base(b)]))
    return out


def _node_index(index: dict[int, int], prog: Program) -> dict[int, int]:
    remap = prog.meta["remap"]
    return {nid: remap[i] for nid, i in index.items() if i in remap}


ELEMENTWISE_STEPS = ELEMENTWISE + ("fused", "fill")


def _donations(values, steps, out_idx, wanted, base) -> dict[int, int]:
    """Donated step -> leaf value, for the requests that can be honoured structurally."""
    consumers: dict[int, int] = {}
    for s in steps:
        for i in values[s].inputs:
            consumers[base(i)] = consumers.get(base(i), 0) + 1
    out: dict[int, int] = {}
    for k, li in wanted:
        b = out_idx[k]
        v = values[b]
        if v.kind != "compute" or b in out or li in out.values():
            continue
        if v.op not in ELEMENTWISE_STEPS and not (   # an epilogue reads its inputs after A, B elementwise
                v.op == "matmul_fused" and all(base(i) != li for i in v.inputs[:2])):
            continue
        lv = values[li]
        if (lv.shape, lv.dtype) != (v.shape, v.dtype) or out_idx.count(b) > 1:
            continue
        # the step may read the leaf only elementwise (same shape, hence the same index)
        if any(base(i) == li and tuple(values[i].shape) != tuple(v.shape) for i in v.inputs):
            continue
        out[b] = li
    return out


def _donors_last(values, steps, donors: set[int]) -> list[int]:
    """Steps reordered so donated producers (and what depends on them) run after everything else."""
    late: set[int] = set()
    for s in steps:
        if s in donors or any(i in late for i in values[s].inputs):
            late.add(s)
    return [s for s in steps if s not in late] + [s for s in steps if s in late]


def _reads_done(values, steps, b, li, base) -> bool:
    """Whether every step other than `b` that reads leaf `li` runs before `b`."""
    t_b = steps.index(b)
    for t, s in enumerate(steps):
        if s != b and t > t_b and any(base(i) == li for i in values[s].inputs):
            return False
    return True


def clear_cache() -> None:
    _CACHE.clear()
