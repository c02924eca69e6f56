"""Donated outputs: new weights written over the old ones, only when that is safe."""
import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.executor.executor import execute
from scellis_jupyter.graph import functional as F
from scellis_jupyter.graph.autodiff import grad
from scellis_jupyter.program.schedule import compile_program

REF = sc.device("reference")


def _sgd_program(donate=True):
    w = F.placeholder((3, 4), "f32", "w")
    x = F.placeholder((5, 3), "f32", "x")
    y = F.matmul(x, w)
    loss = F.sum_(F.mul(y, y))
    (gw,) = grad([loss], [w])
    new_w = F.sub(w, F.mul(gw, 0.01))
    prog, leaves = compile_program([loss, new_w], "reference", "debug", donate={1: w} if donate else None)
    return prog, leaves, w, x


@pytest.mark.parametrize("backend", ["reference", "wgpu"])
def test_update_is_written_in_place_after_every_read(backend):
    dev = sc.device(backend) if backend == "reference" else pytest.importorskip("wgpu") and sc.device("wgpu")
    be = dev.impl
    w = F.placeholder((3, 4), "f32", "w")
    x = F.placeholder((5, 3), "f32", "x")
    y = F.matmul(x, w)
    loss = F.sum_(F.mul(y, y))
    (gw,) = grad([loss], [w])
    new_w = F.sub(w, F.mul(gw, 0.01))
    prog, leaves = compile_program([loss, new_w], be.name, "debug", donate={1: w})
    assert prog.meta["donated"] and not prog.persistent[1:]
    W = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    X = np.random.default_rng(1).standard_normal((5, 3)).astype(np.float32)
    ws, xs = be.from_numpy(W, "f32"), be.from_numpy(X, "f32")
    by = {w.id: ws, x.id: xs}
    outs = execute(prog, [by[l.id] for l in leaves], be)
    assert outs[1].buffer is ws.buffer                     # the new weights live in the old storage
    Y = X.astype(np.float64) @ W
    want = W - 0.01 * (X.T.astype(np.float64) @ (2 * Y))
    np.testing.assert_allclose(be.to_numpy(ws), want, rtol=1e-5, atol=1e-6)
    assert be.to_numpy(outs[0]) == pytest.approx(float((Y * Y).sum()), rel=1e-5)   # loss saw the old weights


def test_unsafe_donation_falls_back_to_its_own_allocation():
    a = F.placeholder((4, 4), "f32", "a")
    out = F.matmul(a, a)                                   # not elementwise: cannot overwrite its input
    prog, _ = compile_program([out], "reference", "debug", donate={0: a})
    assert prog.meta["donated"] == {} and prog.persistent
    b = F.placeholder((4,), "f32", "b")
    wider = F.add(b, F.placeholder((3, 4), "f32", "c"))  # different shape from the leaf: refused
    prog, _ = compile_program([wider], "reference", "debug", donate={0: b})
    assert prog.meta["donated"] == {}


def test_donation_changes_the_program_hash_and_frees_the_arena_slot():
    p1, *_ = _sgd_program(True)
    p2, *_ = _sgd_program(False)
    assert p1.hash != p2.hash
    assert p1.persistent_bytes < p2.persistent_bytes
