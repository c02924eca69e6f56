"""Liveness over a schedule and buffer-arena offsets: the allocation plan the executor follows.

Why: the memory planner's peak is not an estimate beside the engine; it is this plan, which the
executor allocates exactly (one arena, values at fixed offsets, views aliasing their base).

A split arena (`apart` given, SCELLIS_ARENA_SPLIT): the values go into two buffers so that a matmul's output lies
apart from its operands. WebGPU refuses one buffer bound both read-only and writable in a dispatch, so in one arena
no product of a training step could read its operands read-only (matmul `_readonly`); in the GPT step two buffers
let 89% of the matmul FLOPs do so for 2% more arena bytes, but the step ran 7% slower on an H100 (f32; mixed f16
unchanged: benchmarks/RESULTS.md, 2026-12-06 12:50), so the split is off by default. The plan keeps one
address space: the second buffer's values sit at `split` + their offset in it, so the total and every planner
figure read as before, and a backend that binds the arena as one buffer may ignore the split.
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
    split: int = 0             # > 0: values at offsets >= split lie in a second buffer, at offset - split

    def parts(self) -> tuple[int, ...]:
        """The bytes of each buffer the arena takes: (total,) or (first, second)."""
        return (self.split, self.arena_bytes - self.split) if self.split else (self.arena_bytes,)


def arena_slots(plans) -> tuple[int, int]:
    """The bytes of the arena's buffer and of a split arena's second buffer that programs of these arena plans
    need when they share one backend (each buffer grown to its largest use)."""
    parts = [p.parts() for p in plans]
    return max((q[0] for q in parts), default=0), max((q[1] for q in parts if len(q) > 1), default=0)


# a split arena is taken only within this share above the one-buffer arena's bytes, or this many bytes more
SPLIT_SLACK, SPLIT_FLOOR = 0.10, 16 << 20


def plan_arena(sizes: dict[int, int], lifetimes: dict[int, tuple[int, int]], apart: list | None = None) -> ArenaPlan:
    """Assign offsets so no two values live at once overlap; greedy by size (largest first), first fit.

    `apart`: [(weight, outputs, operands)] of the products that would read their operands read-only if the outputs
    lay in another buffer: those values are coloured two ways (`colour_apart`), each packed first-fit into its
    colour's buffer, and every other value into whichever buffer it grows less (the second buffer after the
    first: `split`); unless one buffer stays empty or the two take more than one buffer by over SPLIT_SLACK of it
    and over SPLIT_FLOOR bytes."""
    one = _pack(sizes, lifetimes)
    if not apart:
        return one
    colour = colour_apart(apart, set(sizes))
    if len(set(colour.values())) < 2:
        return one
    offs, ends = _pack_two(sizes, lifetimes, colour)     # both colours placed: neither buffer is empty
    if ends[0] + ends[1] > one.arena_bytes + max(one.arena_bytes * SPLIT_SLACK, SPLIT_FLOOR):
        return one
    plan = ArenaPlan(offsets={v: o + (ends[0] if b else 0) for v, (b, o) in offs.items()}, sizes=dict(one.sizes),
                     lifetimes=dict(lifetimes), arena_bytes=ends[0] + ends[1], live_peak_bytes=one.live_peak_bytes,
                     live_peak_step=one.live_peak_step, split=ends[0])
    return plan


def _pack_two(sizes, lifetimes, colour) -> tuple[dict[int, tuple[int, int]], list[int]]:
    """({value: (buffer, offset)}, [end of buffer 0, end of buffer 1]): largest first, first fit; a coloured value
    in its colour's buffer, any other where its end is lower (buffer 0 on a tie)."""
    placed: list[list] = [[], []]        # per buffer: (offset, end, start_step, end_step)
    ends, out = [0, 0], {}
    for v in sorted(sizes, key=lambda v: (-sizes[v], lifetimes[v][0], v)):
        size = align(max(sizes[v], 1))
        s, e = lifetimes[v]
        if v in colour:
            b = colour[v]
            off = _first_fit(placed[b], size, s, e)
        else:
            o0, o1 = _first_fit(placed[0], size, s, e), _first_fit(placed[1], size, s, e)
            grow0, grow1 = max(ends[0], o0 + size) - ends[0], max(ends[1], o1 + size) - ends[1]
            b, off = (0, o0) if grow0 <= grow1 else (1, o1)
        placed[b].append((off, off + size, s, e))
        ends[b] = max(ends[b], off + size)
        out[v] = (b, off)
    return out, ends


def colour_apart(apart: list, arena: set) -> dict[int, int]:
    """Colour 0 or 1 for the arena values of `apart`: heaviest product first, its outputs take the colour
    opposite its operands' (where those agree), its operands the other one. Values of no product get none
    (plan_arena places them); a product whose operands already differ, or whose outputs already sit with one,
    is left as it falls (it binds read_write)."""
    colour: dict[int, int] = {}
    for _w, outs, ops in sorted(apart, key=lambda a: -a[0]):
        outs = [x for x in outs if x in arena]
        ops = [x for x in ops if x in arena]
        have_ops = {colour[x] for x in ops if x in colour}
        have_outs = {colour[x] for x in outs if x in colour}
        if len(have_ops) == 1:
            c = 1 - next(iter(have_ops))
        elif len(have_outs) == 1:
            c = next(iter(have_outs))
        else:
            c = 1
        for x in outs:
            colour.setdefault(x, c)
        for x in ops:
            colour.setdefault(x, 1 - c)
    return colour


def _first_fit(placed: list, size: int, s: int, e: int) -> int:
    """The lowest offset where `size` bytes live over steps [s, e] clear of `placed` (offset, end, start, end)."""
    off = 0
    for o, oe in sorted((o, oe) for o, oe, ss, se in placed if not (se < s or e < ss)):
        if off + size <= o:
            break
        off = max(off, oe)
    return off


def _pack(sizes: dict[int, int], lifetimes: dict[int, tuple[int, int]]) -> ArenaPlan:
    plan = ArenaPlan(lifetimes=dict(lifetimes))
    placed: list[tuple[int, int, int, int]] = []  # (offset, end, start_step, end_step)
    for v in sorted(sizes, key=lambda v: (-sizes[v], lifetimes[v][0], v)):
        size = align(max(sizes[v], 1))
        s, e = lifetimes[v]
        off = _first_fit(placed, size, s, e)
        placed.append((off, off + size, s, e))
        plan.offsets[v] = off
        plan.sizes[v] = size
        plan.arena_bytes = max(plan.arena_bytes, off + size)
    for t in sorted({t for s, e in lifetimes.values() for t in (s, e)}):
        live = sum(plan.sizes[v] for v, (s, e) in lifetimes.items() if s <= t <= e)
        if live > plan.live_peak_bytes:
            plan.live_peak_bytes, plan.live_peak_step = live, t
    return plan
