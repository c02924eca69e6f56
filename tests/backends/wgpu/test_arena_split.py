"""SCELLIS_ARENA_SPLIT: a wgpu Program's arena planned as two buffers, each matmul's output apart from its operands
(program/liveness.py), so the products bind their operands read-only. The plan keeps one address space (the second
buffer's values after `split`); values alive at once never overlap within a buffer; it falls back to one buffer
when a colour is empty or the split costs over SPLIT_SLACK more bytes. A run trained split gives the unsplit run's
losses bit for bit, its products bind read-only, it replays quickly, and its measured peak is the planned one."""
import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.program.liveness import SPLIT_FLOOR, SPLIT_SLACK, arena_slots, colour_apart, plan_arena

from fixtures import spec_text
from fixtures.devices import needs_wgpu


def _no_overlap(plan):
    """Values alive at once never share bytes of one buffer."""
    vs = list(plan.offsets)
    for i, a in enumerate(vs):
        for b in vs[i + 1:]:
            (sa, ea), (sb, eb) = plan.lifetimes[a], plan.lifetimes[b]
            if eb < sa or ea < sb:
                continue
            oa, ob = plan.offsets[a], plan.offsets[b]
            assert oa + plan.sizes[a] <= ob or ob + plan.sizes[b] <= oa, (a, b)
            if plan.split:       # and no value straddles the split
                assert (oa < plan.split) == (oa + plan.sizes[a] <= plan.split)


def test_a_chain_of_products_alternates_buffers():
    sizes = {i: 1000 + 10 * i for i in range(6)}
    life = {i: (i, i + 1) for i in range(6)}
    apart = [(10, [i + 1], [i]) for i in range(5)]
    p = plan_arena(sizes, life, apart)
    one = plan_arena(sizes, life)
    assert one.split == 0 and one.parts() == (one.arena_bytes,)
    assert p.split > 0 and p.split % 256 == 0 and p.parts() == (p.split, p.arena_bytes - p.split)
    second = {v: p.offsets[v] >= p.split for v in sizes}
    assert all(second[i + 1] != second[i] for i in range(5))
    assert p.live_peak_bytes == one.live_peak_bytes and p.sizes == one.sizes
    assert p.arena_bytes <= one.arena_bytes * (1 + SPLIT_SLACK)
    _no_overlap(p)
    _no_overlap(one)


def test_the_split_falls_back_to_one_buffer():
    big = SPLIT_FLOOR + 4096
    sizes, life = {0: big, 1: big}, {0: (0, 1), 1: (2, 3)}
    # the two would share bytes in one buffer (disjoint lifetimes): apart they take twice as much
    assert plan_arena(sizes, life, [(1, [1], [0])]).split == 0
    assert plan_arena(sizes, life, []).split == 0
    assert plan_arena(sizes, life, [(1, [7], [8])]).split == 0      # values outside the arena: one colour empty
    # twice as much, but a few KiB more in all: within SPLIT_FLOOR
    small = plan_arena({0: 10000, 1: 10000}, life, [(1, [1], [0])])
    assert small.split == 10240 and small.arena_bytes == 20480


def test_the_heaviest_product_is_served_first():
    # c2 = a0 @ b1 (heavy) and b1 = a0 @ w (light): b1 cannot be both apart from a0 and beside it
    colour = colour_apart([(5, [1], [0]), (10, [2], [0, 1])], {0, 1, 2})
    assert colour[0] == colour[1] != colour[2]


def test_arena_slots_take_each_buffer_at_its_largest():
    a, b = plan_arena({0: 5000, 1: 5000}, {0: (0, 0), 1: (1, 1)}, [(1, [1], [0])]), plan_arena({0: 9000}, {0: (0, 0)})
    assert b.split == 0
    if a.split:
        assert arena_slots([a, b]) == (max(a.parts()[0], b.arena_bytes), a.parts()[1])
    assert arena_slots([b]) == (b.arena_bytes, 0)


def _train(monkeypatch, split: bool, tmp_path):
    monkeypatch.setenv("SCELLIS_ARENA_SPLIT", "on" if split else "off")
    run = sc.Run(sc.Spec.from_text(spec_text("tiny_lm", steps=4, seed=4)), device="wgpu", store=tmp_path / str(split))
    return run, run.run_to_end(), None


@needs_wgpu
def test_the_split_step_binds_its_products_read_only(monkeypatch):
    """The tiny LM's step, its launchers run dry (as the planner runs them): without the split no matmul step reads
    its operands read-only (each shares the arena with its output); split, every one but one does (the one whose
    operands the colouring could not put on one side), and so does every product inside attention."""
    from scellis_jupyter.backends.wgpu.kernels import matmul as M
    from scellis_jupyter.plan.model import _StandIn
    from scellis_jupyter.program.training import build_train_step
    spec = sc.Spec.from_text(spec_text("tiny_lm", steps=4, seed=4))
    got = {}
    for split in (False, True):
        monkeypatch.setenv("SCELLIS_ARENA_SPLIT", "on" if split else "off")
        st = build_train_step(spec, spec.recipe["batch_size"], "wgpu", "debug")
        seen, op = [], [None]
        real = M._readonly
        impl = sc.device("wgpu").fresh_impl()
        dispatch = impl.dispatch
        monkeypatch.setattr(impl, "dispatch", lambda v, *a: (op.__setitem__(0, v.op), dispatch(v, *a))[1])
        monkeypatch.setattr(M, "_readonly", lambda a, b, w: (lambda r: (seen.append((op[0], r[0])), r)[1])(
            real(a, b, w)))
        impl.dry_run(st.program, [_StandIn(lf.node) for lf in st.leaves])
        monkeypatch.setattr(M, "_readonly", real)
        got[split] = (st.program.arena.split, seen)
    (s0, ro0), (s1, ro1) = got[False], got[True]
    assert s0 == 0 < s1 and len(ro0) == len(ro1)
    mm0, mm1 = ([r for o, r in ro if o.startswith("matmul")] for ro in (ro0, ro1))
    att0, att1 = ([r for o, r in ro if o.startswith("attention")] for ro in (ro0, ro1))
    assert len(mm0) >= 16 and len(att0) >= 4             # each product asks twice (whole, then its launch)
    assert sum(mm0) == 0 and sum(mm1) >= len(mm1) - 2
    assert sum(att0) < len(att0) and all(att1)           # attention's score products: P v into its output too


@needs_wgpu
def test_a_split_run_trains_the_same_bits_with_read_only_products(monkeypatch, tmp_path):
    run1, r1, ro1 = _train(monkeypatch, False, tmp_path)
    run2, r2, ro2 = _train(monkeypatch, True, tmp_path)
    step1, step2 = run1.step_prog.program.arena, run2.step_prog.program.arena
    assert step1.split == 0 < step2.split
    assert [float(x).hex() for x in run1.loss_history] == [float(x).hex() for x in run2.loss_history]
    assert len(run2.loss_history) == 4
    assert run2.impl.quick_replays > 0               # the split step replays through the quick path
    assert r2["measured_peak_bytes"] == r2["predicted_peak_bytes"] == run2.plan.peak_bytes
    assert r1["measured_peak_bytes"] == r1["predicted_peak_bytes"]
