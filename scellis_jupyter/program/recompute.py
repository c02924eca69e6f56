"""Backward with activation checkpointing: keep segment boundaries, recompute the inside of each segment.

Why in the graph: the step Program is what the planner measures, so recomputation has to be real
kernels in the schedule, not a discount on a formula. The model's nodes are cut into contiguous
segments of about sqrt(n) nodes; the forward runs once as usual, and the backward of each segment,
taken last to first, first replays that segment from its kept inputs (with the same Philox positions,
so dropout masks match) and differentiates the replay. The replayed nodes carry control inputs on
the incoming gradient so the scheduler computes them only when the backward reaches them.
"""
from __future__ import annotations

import math

from ..graph.autodiff import grad
from ..graph.node import Node, _ids
from ..rng.generator import Generator
from ..graph import functional as F

INPUT = -1


def segments(order: list[int], size: int | None = None) -> list[list[int]]:
    """Contiguous runs of the topological order, about sqrt(len) nodes each."""
    n = len(order)
    size = size or max(1, math.ceil(math.sqrt(n)))
    return [order[i:i + size] for i in range(0, n, size)]


def _new_nodes(outs: list[Node], watermark: int) -> list[Node]:
    """Nodes created after `watermark` that the replay outputs depend on."""
    seen: set[int] = set()
    found: list[Node] = []
    stack = list(outs)
    while stack:
        n = stack.pop()
        if n.id in seen or n.id < watermark:
            continue
        seen.add(n.id)
        found.append(n)
        stack.extend(n.inputs)
    return found


def checkpointed_grads(graph, x: Node, params: dict[str, Node], wrt: list[str], loss_of, gen: Generator,
                       training: bool, seg_size: int | None = None, hooks: dict | None = None) -> tuple[Node, Node, dict[str, Node], dict]:
    """(loss, prediction, {param name: gradient}, info) with every segment recomputed in the backward.

    loss_of(pred) builds the loss; info counts the replayed nodes (the extra compute the plan shows).
    """
    order = graph.needed
    deps = graph.deps
    vals: dict[int, Node] = {INPUT: x}
    positions: dict[int, dict] = {}
    for i in order:
        positions[i] = dict(gen.positions)
        vals[i] = graph.node_forward(i, [vals[d] for d in deps[i]], params, training, gen.stream, hooks)
    pred = vals[graph.output]
    loss = loss_of(pred)
    gout: dict[int, Node] = {graph.output: grad([loss], [pred])[0]}
    pgrad: dict[str, Node] = {}
    want = set(wrt)
    consumers: dict[int, set[int]] = {}
    for i in order:
        for d in deps[i]:
            consumers.setdefault(d, set()).add(i)
    keys = {i: graph.spec.nodes[i].key for i in order}
    replayed = 0
    replay_ids: set[int] = set()
    segs = segments(order, seg_size)
    for seg in reversed(segs):
        inside = set(seg)
        outs = [i for i in seg if i in gout and (i == graph.output or consumers.get(i, set()) - inside)]
        if not outs:
            continue
        ext = []
        for i in seg:
            for d in deps[i]:
                if d not in inside and d not in ext:
                    ext.append(d)
        watermark = next(_ids)
        replay = gen.replay(positions[seg[0]]) if hasattr(gen, "replay") else Generator(gen.seed, positions[seg[0]])
        cv = {d: vals[d] for d in ext}
        for i in seg:
            cv[i] = graph.node_forward(i, [cv[d] for d in deps[i]], params, training, replay.stream, hooks)
        new = _new_nodes([cv[o] for o in outs], watermark)
        replayed += len(new)
        replay_ids |= {n.id for n in new}
        gates = tuple(gout[o] for o in outs)
        for n in new:
            n.after = gates
        names = [n for n in want if any(n.startswith(keys[i] + ".") for i in seg)]
        names.sort()
        grad_ext = [d for d in ext if d != INPUT and vals[d].dtype in ("f32", "f16", "f64")]
        wrt_nodes = [vals[d] for d in grad_ext] + [params[n] for n in names]
        gs = grad([cv[o] for o in outs], wrt_nodes, grad_outputs=[gout[o] for o in outs])
        for d, g in zip(grad_ext, gs[:len(grad_ext)]):
            if g is not None:
                gout[d] = _acc(gout.get(d), g)
        for n, g in zip(names, gs[len(grad_ext):]):
            if g is not None:
                pgrad[n] = _acc(pgrad.get(n), g)
    return loss, pred, pgrad, {"segments": len(segs), "replayed_nodes": replayed, "replay_ids": replay_ids}


def _acc(a: Node | None, b: Node) -> Node:
    return b if a is None else F.add(a, b)
