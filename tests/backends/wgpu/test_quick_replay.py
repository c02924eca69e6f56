"""The executor's quick replay on wgpu (a rerun over the same buffer windows skips binding and lookups):
it must miss, and fall back to the full path, whenever anything it keyed on changes. Each result is
checked against float64 numpy (rtol 1e-5, atol 1e-6: f32 kernels on llvmpipe)."""
import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.backends.wgpu import kernels as K
from scellis_jupyter.executor.executor import execute
from scellis_jupyter.graph import functional as F
from scellis_jupyter.program.schedule import compile_program

from fixtures.devices import WG, needs_wgpu

pytestmark = needs_wgpu
R = np.random.default_rng(23)
TOL = dict(rtol=1e-5, atol=1e-6)


def _softmax(z):
    z = z.astype(np.float64)
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _prog(shape=(9, 7)):
    xp = F.placeholder(shape, "f32", "x")
    prog, leaves = compile_program([F.softmax(F.add(xp, F.scalar(0.5)), -1)], "wgpu", "debug")
    return prog


def test_quick_replay_hits_on_the_same_windows_and_misses_on_new_input_buffers():
    impl = WG.fresh_impl()
    prog = _prog()
    a = R.standard_normal((9, 7)).astype(np.float32)
    xs = impl.from_numpy(a, "f32")
    for _ in range(4):
        (o,) = execute(prog, [xs], impl)
        np.testing.assert_allclose(impl.to_numpy(o), _softmax(a + 0.5), **TOL)
        del o
    hits = impl.quick_replays
    assert hits >= 1                                    # the steady state took the quick path
    b = R.standard_normal((9, 7)).astype(np.float32)
    ys = impl.from_numpy(b, "f32")                      # a new input buffer: the quick key misses
    (o,) = execute(prog, [ys], impl)
    assert impl.quick_replays == hits
    np.testing.assert_allclose(impl.to_numpy(o), _softmax(b + 0.5), **TOL)
    del o
    c = R.standard_normal((9, 7)).astype(np.float32)
    impl.write(xs, c)                                   # back to the first buffer, new contents
    (o,) = execute(prog, [xs], impl)
    np.testing.assert_allclose(impl.to_numpy(o), _softmax(c + 0.5), **TOL)


def test_held_outputs_are_never_handed_out_again_by_the_quick_path():
    impl = WG.fresh_impl()
    prog = _prog()
    xs = impl.from_numpy(np.zeros((9, 7), np.float32), "f32")
    held, want = [], []
    for i in range(6):
        a = R.standard_normal((9, 7)).astype(np.float32)
        impl.write(xs, a)
        (o,) = execute(prog, [xs], impl)
        held.append(o)
        want.append(_softmax(a + 0.5))
    assert len({o.buffer.uid for o in held}) == len(held)
    for o, w in zip(held, want):
        np.testing.assert_allclose(impl.to_numpy(o), w, **TOL)


def _steady_quick(impl, body, warm: int, rounds: int) -> int:
    """Quick replays over `rounds` calls of `body` after `warm` calls of it."""
    for _ in range(warm):
        body()
    before = impl.quick_replays
    for _ in range(rounds):
        body()
    return impl.quick_replays - before


def test_programs_taking_turns_over_one_output_pool_replay_quickly():
    """Two programs that alternate on one backend (a pool worker's gradient and update steps) draw their
    same-size outputs from one pool, which rotates: the buffer free first is rarely the one the other's
    replay was recorded with. Each remembered replay's own buffers are tried, so the steady state is quick."""
    impl = WG.fresh_impl()
    xp = F.placeholder((9, 7), "f32", "x")
    three, _ = compile_program([F.add(xp, F.scalar(1.0)), F.mul(xp, F.scalar(2.0)), F.sub(xp, F.scalar(3.0))],
                               "wgpu", "debug")
    one = _prog()
    a = R.standard_normal((9, 7)).astype(np.float32)
    xs = impl.from_numpy(a, "f32")

    def both():
        outs = execute(three, [xs], impl)
        for o, w in zip(outs, (a + 1.0, a * 2.0, a - 3.0)):
            np.testing.assert_allclose(impl.to_numpy(o), w, **TOL)
        del outs, o
        (o,) = execute(one, [xs], impl)
        np.testing.assert_allclose(impl.to_numpy(o), _softmax(a + 0.5), **TOL)
    assert _steady_quick(impl, both, warm=4, rounds=4) == 8      # both programs, every round


def test_a_program_with_more_outputs_than_the_pool_held_replays_quickly():
    """A program returning more outputs than the output pool's base size (a pool worker's gradient program
    returns every gradient): the pool grows to hold them, so later runs find their buffers again."""
    impl = WG.fresh_impl()
    xp = F.placeholder((5, 3), "f32", "x")
    n = 80                                              # over runtime.POOL_MAX (64)
    many, _ = compile_program([F.add(xp, F.scalar(float(i))) for i in range(n)], "wgpu", "debug")
    a = R.standard_normal((5, 3)).astype(np.float32)
    xs = impl.from_numpy(a, "f32")

    def run():
        got = impl.read_many(execute(many, [xs], impl))
        for k in (0, 41, n - 1):
            np.testing.assert_allclose(got[k], a + k, **TOL)
    assert _steady_quick(impl, run, warm=3, rounds=2) == 2


def test_arena_growth_invalidates_the_quick_entries():
    impl = WG.fresh_impl()
    small, big = _prog((4, 5)), _prog((64, 300))
    a = R.standard_normal((4, 5)).astype(np.float32)
    xs = impl.from_numpy(a, "f32")
    for _ in range(3):
        (o,) = execute(small, [xs], impl)
        del o
    arena = impl._arena
    assert impl._quick
    bx = R.standard_normal((64, 300)).astype(np.float32)
    (o,) = execute(big, [impl.from_numpy(bx, "f32")], impl)
    np.testing.assert_allclose(impl.to_numpy(o), _softmax(bx + 0.5), **TOL)
    del o
    assert impl._arena is not arena and small.hash not in impl._quick    # grown: entries over the old arena gone
    hits = impl.quick_replays
    (o,) = execute(small, [xs], impl)                   # the full path again, over the new arena
    assert impl.quick_replays == hits
    np.testing.assert_allclose(impl.to_numpy(o), _softmax(a + 0.5), **TOL)


def test_cleared_records_rerun_the_launchers(monkeypatch):
    impl = WG.fresh_impl()
    prog = _prog()
    a = R.standard_normal((9, 7)).astype(np.float32)
    xs = impl.from_numpy(a, "f32")
    for _ in range(3):
        (o,) = execute(prog, [xs], impl)
        del o
    calls = []
    for op in ("softmax", "fused", "add"):
        fn = K.LAUNCHERS.get(op)
        if fn is not None:
            monkeypatch.setitem(K.LAUNCHERS, op, lambda be, v, ins, out, fn=fn: (calls.append(v.op), fn(be, v, ins, out)))
    impl._records.clear()                               # as the tuning tests do to re-record with new kernels
    impl._prog_params.clear()
    (o,) = execute(prog, [xs], impl)
    assert calls                                        # recorded again through the launchers
    np.testing.assert_allclose(impl.to_numpy(o), _softmax(a + 0.5), **TOL)


def test_outputs_that_are_views_or_leaves_come_back_where_the_full_path_puts_them():
    impl = WG.fresh_impl()
    xp = F.placeholder((6, 4), "f32", "x")
    y = F.softmax(F.add(xp, F.scalar(1.0)), -1)
    prog, leaves = compile_program([F.reshape(y, (4, 6)), F.transpose(y), y], "wgpu", "debug")
    xs = impl.from_numpy(np.zeros((6, 4), np.float32), "f32")
    for i in range(4):
        a = R.standard_normal((6, 4)).astype(np.float32)
        impl.write(xs, a)
        outs = execute(prog, [xs], impl)
        w = _softmax(a + 1.0)
        for o, want in zip(outs, (w.reshape(4, 6), w.T, w)):
            assert o.shape == want.shape
            np.testing.assert_allclose(impl.to_numpy(o), want, **TOL)
        del outs
    assert impl.quick_replays >= 1


def test_timing_bypasses_the_quick_path():
    impl = WG.fresh_impl()
    prog = _prog()
    xs = impl.from_numpy(R.standard_normal((9, 7)).astype(np.float32), "f32")
    for _ in range(3):
        (o,) = execute(prog, [xs], impl)
        del o
    if not impl.start_timing():
        pytest.skip("no timestamp-query on this adapter")
    hits = impl.quick_replays
    (o,) = execute(prog, [xs], impl)
    del o
    assert impl.quick_replays == hits and impl.stop_timing()     # every dispatch went through its launcher


def test_flush_period_comes_from_the_environment_and_bad_values_are_refused(monkeypatch):
    monkeypatch.setenv("SCELLIS_WGPU_FLUSH_US", "1500")
    impl = WG.fresh_impl()
    assert impl.flush_after == pytest.approx(1.5e-3)
    prog = _prog()
    a = R.standard_normal((9, 7)).astype(np.float32)
    xs = impl.from_numpy(a, "f32")
    for _ in range(5):                              # replays under the longer period still read back right
        (o,) = execute(prog, [xs], impl)
    np.testing.assert_allclose(impl.to_numpy(o), _softmax(a + 0.5), **TOL)
    for bad in ("soon", "-1"):
        monkeypatch.setenv("SCELLIS_WGPU_FLUSH_US", bad)
        with pytest.raises(sc.SettingError, match="SCELLIS_WGPU_FLUSH_US"):
            WG.fresh_impl()
