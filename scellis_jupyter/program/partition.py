"""How a step is divided over devices: optimizer-state shards and layer-relay stages.

Why here: both are fixes the planner offers for a model that does not fit one device, and a fix's
peak must come from the real per-device Program, so the builder needs the same division the pool
will run: parameters owned per rank (sharded optimizer state, ZeRO stage 1) and contiguous stages
cut where a single activation crosses (layer relay, one micro-batch in flight).
"""
from __future__ import annotations

from ..errors import ScellisError

INPUT = -1


def shard_owner(sizes: dict[str, int], world: int) -> dict[str, int]:
    """Each parameter's owning rank: largest first onto the least-loaded rank (ties: lower rank)."""
    if world < 1:
        raise ScellisError(f"a shard count must be at least 1, got {world}", code="plan", where="shard")
    load = [0] * world
    owner = {}
    for name in sorted(sizes, key=lambda n: (-sizes[n], n)):
        r = min(range(world), key=lambda k: (load[k], k))
        owner[name] = r
        load[r] += sizes[name]
    return owner


def heaviest_rank(owner: dict[str, int], sizes: dict[str, int], world: int) -> int:
    load = [0] * world
    for n, r in owner.items():
        load[r] += sizes[n]
    return max(range(world), key=lambda k: (load[k], -k))


def cut_points(graph) -> list[int]:
    """Positions p in the needed order after which exactly one value (order[p]) crosses forward."""
    order = graph.needed
    last_use: dict[int, int] = {}
    for p, i in enumerate(order):
        for d in graph.deps[i]:
            last_use[d] = max(last_use.get(d, -1), p)
    cuts = []
    for p in range(len(order) - 1):
        crossing = [d for d, u in last_use.items() if u > p and (d == INPUT or order.index(d) <= p)]
        if crossing == [order[p]]:
            cuts.append(p)
    return cuts


def relay_stages(graph, stages: int) -> list[list[int]]:
    """`stages` contiguous runs of the needed order, cut at single-value crossings, balancing parameters."""
    order = graph.needed
    if stages < 1:
        raise ScellisError(f"a relay needs at least 1 stage, got {stages}", code="plan", where="relay")
    if stages == 1:
        return [order]
    cuts = cut_points(graph)
    if len(cuts) < stages - 1:
        raise ScellisError(f"the model has {len(cuts) + 1} places to cut, fewer than {stages} relay stages",
                           code="plan", where="relay", hint="use fewer stages")
    per = [sum(_numel(p.shape) for p in graph.node_params[graph.spec.nodes[i].key]) for i in order]
    cum = [0]
    for v in per:
        cum.append(cum[-1] + v)
    total = cum[-1] or 1
    chosen: list[int] = []
    for k in range(1, stages):
        left = [c for c in cuts if (not chosen or c > chosen[-1])]
        left = left[:len(left) - (stages - 1 - k)] if stages - 1 - k else left
        c = min(left, key=lambda c: (abs(cum[c + 1] - k * total / stages), c))
        chosen.append(c)
    bounds = [-1] + chosen + [len(order) - 1]
    return [order[bounds[j] + 1:bounds[j + 1] + 1] for j in range(stages)]


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
