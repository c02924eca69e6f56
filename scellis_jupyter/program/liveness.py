"""Liveness over a schedule and buffer-arena offsets: the allocation plan the executor follows.

Why: the memory planner's peak is not an estimate beside the engine; it is this plan, which the
executor allocates exactly (one arena, values at fixed offsets, views aliasing their base).
"""
from __future__ import annotations

from dataclasses import dataclass, field

ALIGN = 256  # WebGPU's minStorageBufferOffsetAlignment upper bound: every slot starts aligned


def align(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


@dataclass
class ArenaPlan:
    offsets: dict[int, int] = field(default_factory=dict)    # value index -> byte offset in the arena
    sizes: dict[int, int] = field(default_factory=dict)      # value index -> aligned bytes
    lifetimes: dict[int, tuple[int, int]] = field(default_factory=dict)
    arena_bytes: int = 0
    live_peak_bytes: int = 0   # the sum of live sizes at the worst step (a lower bound on arena_bytes)
    live_peak_step: int | None = None


def plan_arena(sizes: dict[int, int], lifetimes: dict[int, tuple[int, int]]) -> ArenaPlan:
    """Assign offsets so no two values live at once overlap; greedy by size (largest first), first fit."""
    plan = ArenaPlan(lifetimes=dict(lifetimes))
    placed: list[tuple[int, int, int, int]] = []  # (offset, end, start_step, end_step)
    for v in sorted(sizes, key=lambda v: (-sizes[v], lifetimes[v][0], v)):
        size = align(max(sizes[v], 1))
        s, e = lifetimes[v]
        clash = sorted((o, oe) for o, oe, ss, se in placed if not (se < s or e < ss))
        off = 0
        for o, oe in clash:
            if off + size <= o:
                break
            off = max(off, oe)
        placed.append((off, off + size, s, e))
        plan.offsets[v] = off
        plan.sizes[v] = size
        plan.arena_bytes = max(plan.arena_bytes, off + size)
    for t in sorted({t for s, e in lifetimes.values() for t in (s, e)}):
        live = sum(plan.sizes[v] for v, (s, e) in lifetimes.items() if s <= t <= e)
        if live > plan.live_peak_bytes:
            plan.live_peak_bytes, plan.live_peak_step = live, t
    return plan
