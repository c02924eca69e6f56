"""The multi-tensor fused kernel (kernels/fused_multi.wgsl): one dispatch updates every tensor of a batch
(program/batching.py) whose operands share buffers, with the values the one-by-one kernels give."""
import numpy as np
import pytest

from scellis_jupyter.executor.executor import execute
from scellis_jupyter.graph import functional as F
from scellis_jupyter.program.schedule import compile_program

from fixtures.devices import WG, needs_wgpu

pytestmark = needs_wgpu
R = np.random.default_rng(5)
SHAPES = [(64,), (16, 32), (128,), (8, 8, 4)]       # sizes multiple of 256 bytes: packed into one slab
ODD = [(10,)]                                       # its own buffer: the one-by-one path


def _program(shapes):
    """An SGD-with-momentum-like update per tensor, in place: m' = 0.9 m + g * lr; w' = w - m' * scale."""
    lr = F.placeholder((), "f32", "lr")
    ws = [F.placeholder(s, "f32", f"w{i}") for i, s in enumerate(shapes)]
    ms = [F.placeholder(s, "f32", f"m{i}") for i, s in enumerate(shapes)]
    gs = [F.placeholder(s, "f32", f"g{i}") for i, s in enumerate(shapes)]
    outs, donate = [], {}
    for w, m, g in zip(ws, ms, gs):
        nm = F.add(F.mul(m, 0.9), F.mul(g, lr))
        nw = F.sub(w, F.mul(nm, F.sqrt(F.add(lr, 1.0))))
        donate[len(outs)] = m
        outs.append(nm)
        donate[len(outs)] = w
        outs.append(nw)
    prog, leaves = compile_program(outs, "wgpu", "debug", donate=donate)
    return prog, leaves, lr, ws, ms, gs


def _want(lr, w, m, g):
    nm = m.astype(np.float64) * 0.9 + g.astype(np.float64) * lr
    return nm, w - nm * np.sqrt(lr + 1.0)


@pytest.mark.parametrize("shapes", [SHAPES, SHAPES + ODD])
def test_batched_update_is_one_dispatch_per_kind_and_matches_float64(shapes):
    prog, leaves, lr, ws, ms, gs = _program(shapes)
    marked = [prog.values[s].attrs.get("batch") for s in prog.steps]
    assert sum(b is not None for b in marked) == 2 * len(shapes)       # both kinds batched
    impl = WG.fresh_impl()
    data = {id(n): R.standard_normal(n.shape).astype(np.float32) for n in ws + ms + gs}
    data[id(lr)] = np.float32(0.01)
    slab = impl.from_numpy_many([(data[id(n)], "f32") for n in ws + ms])
    store = dict(zip([id(n) for n in ws + ms], slab))
    store.update(zip([id(n) for n in gs], impl.from_numpy_many([(data[id(n)], "f32") for n in gs])))
    store[id(lr)] = impl.from_numpy(np.asarray(data[id(lr)]), "f32")
    before = impl.dispatches
    outs = execute(prog, [store[id(l)] for l in leaves], impl)
    got = impl.read_many(outs)
    n_odd = sum(s in ODD for s in shapes)
    if impl.unalias:     # Dawn: one tensor at a time, each in-place input copied apart first (WebGPU's aliasing rule)
        assert impl.dispatches - before >= 2 * len(shapes)
    else:
        assert impl.dispatches - before == 2 * (1 + n_odd)             # one per kind, plus the odd one each
    for k, (w, m, g) in enumerate(zip(ws, ms, gs)):
        nm, nw = _want(0.01, data[id(w)], data[id(m)], data[id(g)])
        np.testing.assert_allclose(got[2 * k], nm, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(got[2 * k + 1], nw, rtol=1e-6, atol=1e-6)
    # in place: the donated outputs are the slab windows themselves
    assert all(o.buffer is slab[0].buffer for o, s in zip(outs, [s for s in shapes for _ in "mw"]) if s not in ODD)


def test_batched_equals_one_by_one_bitwise(monkeypatch):
    """Batching changes how many dispatches run, never a value: the same program with it switched off."""
    results = []
    for multi in ("1", "0"):
        monkeypatch.setenv("SCELLIS_MULTI_TENSOR", multi)
        prog, leaves, lr, ws, ms, gs = _program(SHAPES)
        impl = WG.fresh_impl()
        rng = np.random.default_rng(9)
        feeds = {}
        for n in ws + ms + gs:
            feeds[id(n)] = rng.standard_normal(n.shape).astype(np.float32)
        slab = impl.from_numpy_many([(feeds[id(n)], "f32") for n in ws + ms])
        store = dict(zip([id(n) for n in ws + ms], slab))
        store.update(zip([id(n) for n in gs], impl.from_numpy_many([(feeds[id(n)], "f32") for n in gs])))
        store[id(lr)] = impl.from_numpy(np.float32(0.03), "f32")
        results.append(impl.read_many(execute(prog, [store[id(l)] for l in leaves], impl)))
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)
