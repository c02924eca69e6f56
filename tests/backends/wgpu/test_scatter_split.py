"""The split scatter_add (prod and fast tiers: pieces of a long index axis, then the pieces in order) on wgpu.

Reference: numpy float64 np.add.at; f32 tolerance 1e-5 relative to the largest |output| (each output adds up
to ~200 unit normals in a different order than the reference's one-by-one float32 rounding). Debug keeps the
one-stage kernel, bit-identical with the reference (test_indexing.py covers that path).
"""
import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.backends.wgpu.kernels import indexing as I
from scellis_jupyter.executor.executor import execute
from scellis_jupyter.graph import functional as F
from scellis_jupyter.program.schedule import compile_program

WG = sc.device("wgpu")


def _run(tier, base, idx, src, axis=0):
    b, i, s = (sc.tensor(a, device=WG) for a in (base, idx, src))
    node = F.scatter_add(b.node, axis, i.node, s.node)
    prog, leaves = compile_program([node], "wgpu", tier)
    (out,) = execute(prog, [leaf.storage for leaf in leaves], WG.impl)
    return WG.impl.to_numpy(out), WG.impl


def _case(n_pos=3000, vocab=7, cols=5, dtype=np.float32, seed=0):
    r = np.random.default_rng(seed)
    tok = r.integers(0, vocab, n_pos)
    idx = np.repeat(tok[:, None], cols, 1).astype(np.int32)          # an embedding gradient's index
    src = r.standard_normal((n_pos, cols)).astype(dtype)
    base = r.standard_normal((vocab, cols)).astype(dtype)
    want = base.astype(np.float64).copy()
    np.add.at(want, (idx, np.arange(cols)[None, :]), src.astype(np.float64))
    return base, idx, src, want


def test_split_is_chosen_only_off_debug():
    class B:
        binding_limit = 1 << 27
    be = B()
    for tier, split in (("debug", False), (None, False), ("prod", True), ("fast", True)):
        be.tier = tier
        assert (I.split_pieces(be, 96 * 384, 96, 16384) > 1) is split
    be.tier = "prod"
    assert I.split_pieces(be, 96 * 384, 96, 500) == 1             # short axis: one stage
    assert I.split_pieces(be, 96 * 384, 96, 16384) <= 16384 // 256
    be.binding_limit = 96 * 384 * 4 * 3                           # partials must fit one binding
    assert I.split_pieces(be, 96 * 384, 96, 16384) * 96 * 384 * 4 <= be.binding_limit


@pytest.mark.parametrize("tier", ["prod", "fast"])
def test_split_matches_float64(tier):
    base, idx, src, want = _case()
    got, be = _run(tier, base, idx, src)
    assert I.split_pieces(be, base.size, base.shape[0], idx.shape[0]) > 1
    err = np.abs(got - want).max() / np.abs(want).max()
    assert err < 1e-5, err


def test_split_deterministic_and_close_to_debug():
    base, idx, src, _ = _case(n_pos=4096, vocab=11, cols=9, seed=3)
    a, _ = _run("prod", base, idx, src)
    b, _ = _run("prod", base, idx, src)
    assert np.array_equal(a, b)                                   # fixed piece order: same bits run to run
    d, _ = _run("debug", base, idx, src)
    assert np.abs(a - d).max() <= 1e-5 * np.abs(d).max()
    assert not np.array_equal(a, np.zeros_like(a))


def test_split_f16_and_i32():
    base, idx, src, want = _case(n_pos=2048, vocab=5, cols=3, dtype=np.float16, seed=5)
    got, _ = _run("prod", base, idx, src)
    assert np.abs(got.astype(np.float64) - want).max() / np.abs(want).max() < 3e-3     # f16 rounding per piece
    r = np.random.default_rng(6)
    tok = r.integers(0, 4, 2048)
    idx = np.repeat(tok[:, None], 2, 1).astype(np.int32)
    src = r.integers(-100, 100, (2048, 2)).astype(np.int32)
    base = r.integers(-5, 5, (4, 2)).astype(np.int32)
    want = base.copy()
    np.add.at(want, (idx, np.arange(2)[None, :]), src)
    got, _ = _run("prod", base, idx, src)
    assert np.array_equal(got, want)                              # integer sums are exact in any order


def test_split_out_of_range_dropped_like_one_stage():
    base, idx, src, _ = _case(n_pos=2048, vocab=6, cols=4, seed=8)
    idx[::7, :] = 99                                              # dropped entries (matches no output)
    a, _ = _run("prod", base, idx, src)
    d, _ = _run("debug", base, idx, src)
    assert np.abs(a - d).max() <= 1e-5 * np.abs(d).max()
