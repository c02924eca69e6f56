"""sum_many (the step's gradient guard and norm as one multi-tensor reduction, kernels/reduce_many.wgsl):
against float64 numpy and the reference, with and without subgroups, f32 and f16, members crossing the
chunk size and more members than one table holds, an input larger than a binding (a subprocess with a
4 MiB limit), bit-identical reruns and bits that do not depend on where the inputs lie, its gradient,
and whole short sc.train runs (finite guard and clip_grad_norm) against the reference.
Tolerances: f32 sums rtol 1e-6 * sqrt(n) against float64 (another summation order); f16 inputs sum in
f32 and round once: rtol 1e-3; the runs' losses rtol 2e-4 (the reference adds in another order).
"""
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.backends.wgpu.kernels import reduce_many as rm
from scellis_jupyter.graph import functional as F
from scellis_jupyter.graph.autodiff import grad

from fixtures.devices import WG, needs_wgpu

pytestmark = needs_wgpu
REF = sc.device("reference")
R = np.random.default_rng(5)
SHAPES = [(5,), (rm.CHUNK,), (rm.CHUNK + 1,), (300, 70), (1,), (3, 7, 11), (64, 1000)]


def on(dev, arrays, square, dtype=None, arena=False):
    ts = [sc.tensor(a, device=dev) for a in arrays]
    nodes = [(t.to(dtype) if dtype else t).node for t in ts]
    if arena:                                   # computed inside the program: the inputs lie in its arena
        nodes = [F.mul(n, 1.0) for n in nodes]
    return sc.Tensor(F.sum_many(nodes, square=square), dev).numpy()


def want(arrays, square):
    return sum(float(((a.astype(np.float64) ** 2) if square else a.astype(np.float64)).sum()) for a in arrays)


@pytest.mark.parametrize("square", [False, True], ids=["sum", "squares"])
def test_matches_float64_and_reference(path, square):
    arrays = [R.standard_normal(s).astype(np.float32) for s in SHAPES]
    n = sum(a.size for a in arrays)
    got = on(WG, arrays, square)
    w = want(arrays, square)
    tol = 1e-6 * math.sqrt(n) * max(1.0, sum(float(np.abs(a).astype(np.float64).sum()) for a in arrays) / n)
    assert abs(float(got) - w) <= tol * max(1.0, abs(w)), (got, w)
    np.testing.assert_allclose(on(REF, arrays, square), w, rtol=1e-5)
    np.testing.assert_allclose(on(WG, arrays, square, arena=True), w, rtol=tol)


def test_f16_inputs(path):
    arrays = [R.standard_normal(s).astype(np.float16) for s in [(7,), (rm.CHUNK + 3,), (50, 33)]]
    got = on(WG, arrays, False, dtype="f16")
    assert got.dtype == np.float16
    w = want(arrays, False)
    assert abs(float(got) - w) <= 1e-3 * sum(float(np.abs(a.astype(np.float64)).sum()) for a in arrays)


def test_more_members_than_a_table(path):
    arrays = [R.standard_normal((int(R.integers(1, 300)),)).astype(np.float32) for _ in range(rm.MAX_MEMBERS + 37)]
    arrays[17][3] = 1e3
    got = on(WG, arrays, True, arena=True)
    np.testing.assert_allclose(got, want(arrays, True), rtol=1e-5)


def test_non_finite_reaches_the_sum():
    arrays = [R.standard_normal(s).astype(np.float32) for s in [(100,), (rm.CHUNK * 2 + 5,), (9,)]]
    arrays[1][rm.CHUNK + 7] = np.inf
    assert on(WG, arrays, False) == np.inf
    arrays[2][4] = np.nan
    assert np.isnan(on(WG, arrays, False)) and np.isnan(on(WG, arrays, True))


def test_bits_rerun_and_placement():
    """Same bits twice, and the same bits whether the inputs lie in their own buffers or in one arena
    (the chunking follows the shapes only)."""
    arrays = [R.standard_normal(s).astype(np.float32) for s in SHAPES * 3]
    a, b = on(WG, arrays, True), on(WG, arrays, True)
    c = on(WG, arrays, True, arena=True)
    assert a.tobytes() == b.tobytes() == c.tobytes()


def test_arena_inputs_take_one_dispatch_and_the_row_sum(monkeypatch):
    arrays = [R.standard_normal((97 + k,)).astype(np.float32) for k in range(23)]
    seen = []
    real = WG.impl.launch

    def spy(key, *a, **k):
        if WG.impl._mode != "dry":             # not the uniform-size estimate (a dry run of the launches)
            seen.append(key.split(":")[0])
        return real(key, *a, **k)
    monkeypatch.setattr(WG.impl, "launch", spy)
    on(WG, arrays, False, arena=True)
    assert seen.count("reduce_many") == 1 and seen.count("reduce") == 1, seen


def test_gradient_rule():
    a = R.standard_normal((4, 5)).astype(np.float32)
    b = R.standard_normal((3,)).astype(np.float32)
    xa, xb = F.placeholder(a.shape, "f32", "a"), F.placeholder(b.shape, "f32", "b")
    for square in (False, True):
        ga, gb = grad([F.sum_many([xa, xb], square=square)], [xa, xb])
        from scellis_jupyter.executor.executor import execute
        from scellis_jupyter.program.schedule import compile_program
        prog, leaves = compile_program([ga, gb], REF.backend, "debug")
        feed = {id(xa): a, id(xb): b}
        outs = execute(prog, [REF.impl.from_numpy(feed[id(ln)], "f32") for ln in leaves], REF.impl)
        got = [REF.impl.to_numpy(o) for o in outs]
        np.testing.assert_allclose(got[0], 2 * a if square else np.ones_like(a), rtol=1e-6)
        np.testing.assert_allclose(got[1], 2 * b if square else np.ones_like(b), rtol=1e-6)


SPLIT = r"""
import numpy as np, scellis_jupyter as sc
from scellis_jupyter.graph import functional as F
wg = sc.device("wgpu")
assert wg.impl.binding_limit == 4 * 2**20, wg.impl.binding_limit
r = np.random.default_rng(0)
arrays = [r.standard_normal(n).astype(np.float32) for n in (1_600_000, 1000, 1_200_001)]   # 6.4 + 4.8 MB
for sq in (False, True):
    got = float(sc.Tensor(F.sum_many([F.mul(sc.tensor(a, device=wg).node, 1.0) for a in arrays], square=sq), wg).numpy())
    w = sum(float((a.astype(np.float64) ** (2 if sq else 1)).sum()) for a in arrays)
    assert abs(got - w) <= 1e-6 * 2000 * max(1.0, abs(w)), (got, w)
print("SPLIT-OK")
"""


def test_inputs_larger_than_a_binding():
    env = dict(os.environ, SCELLIS_MAX_BINDING_BYTES=str(4 * 2**20))
    r = subprocess.run([sys.executable, "-c", SPLIT], env=env, capture_output=True, text=True, timeout=600)
    assert "SPLIT-OK" in r.stdout, r.stderr[-3000:]


SPEC = """
name = "sum-many-mlp"
[data]
dataset = "synthetic_classification"
n_rows = 256
n_features = 40
n_classes = 5
[model]
nodes = [{ op = "linear", out = 48 }, { op = "layer_norm" }, { op = "relu" }, { op = "linear", out = 5 }]
[recipe]
optimizer = { name = "adamw", lr = 3e-3 }
batch_size = 32
clip_grad_norm = 0.5
determinism = "debug"
"""


def test_whole_train_run_matches_reference(tmp_path):
    runs = [sc.train(SPEC, device=d, steps=6, store=str(tmp_path / n), progress=False)
            for d, n in ((WG, "w"), (REF, "r"))]
    for k, v in runs[0].weights().items():
        np.testing.assert_allclose(v, runs[1].weights()[k], rtol=1e-3, atol=2e-5)
    prog = runs[0].step_prog.program
    ops = [prog.values[s].op for s in prog.steps]
    assert ops.count("sum_many") == 2          # the finite guard and the clipping norm, one op each
