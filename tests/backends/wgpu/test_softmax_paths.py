"""Every layout of kernels/softmax.wgsl, with and without subgroups, against float64 numpy.

Layouts: one invocation per column row (inner > 1), a subgroup per short contiguous row (8 rows a
workgroup), a workgroup per long row, vec4 loads (R a multiple of 4) or scalar ones, strided scalar rows.
Shapes cover 1-element rows, R not a multiple of 4 / 8 / 32 / 256, a last workgroup with fewer rows
than it takes, and a 70 000-element row. The subgroup path is switched off in-process with
`use_subgroups(False)` (which also forgets recorded programs) and, in a fresh process, by
SCELLIS_WGPU_SUBGROUPS=off (then the device is opened without the feature).
Tolerances (f32 against float64): softmax rtol 1e-5, atol 2e-6; log_softmax rtol 1e-5, atol 2e-5
(an f32 sum of up to 70 000 exps in another order); f16 storage: rtol 2e-3, atol 1e-3 (one f16 ulp).
"""
import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.backends.wgpu.kernels import softmax as softmax_kernel
from scellis_jupyter.graph import functional as F

from fixtures.devices import WG, needs_wgpu

pytestmark = needs_wgpu
R = np.random.default_rng(81)

SHAPES = [((6, 1), -1), ((5, 7), -1), ((3, 1023), -1), ((4, 1024), -1), ((3, 1028), -1), ((2, 5001), -1),
          ((37, 256), -1), ((9, 36), -1), ((1, 70000), -1), ((5, 300, 3), 1), ((4, 7, 20), 1), ((3, 2, 33), 0)]


def reference(a, axis, op):
    x = a.astype(np.float64)
    m = x.max(axis=axis, keepdims=True)
    lse = m + np.log(np.exp(x - m).sum(axis=axis, keepdims=True))
    return np.exp(x - lse) if op == "softmax" else x - lse


def run(a, axis, op, dtype="f32"):
    fn = F.softmax if op == "softmax" else F.log_softmax
    t = sc.tensor(a, device=WG) if dtype == "f32" else sc.tensor(a, device=WG).to("f16")
    return sc.Tensor(fn(t.node, axis), WG).numpy()


@pytest.mark.parametrize("shape,axis", SHAPES, ids=[f"{s}-{a}" for s, a in SHAPES])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_layouts(path, shape, axis, op):
    a = (R.standard_normal(shape) * 3).astype(np.float32)
    before = set(WG.impl._pipelines)
    got = run(a, axis, op)
    want = reference(a, axis, op)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6 if op == "softmax" else 2e-5)
    ax = axis % len(shape)
    inner = int(np.prod(shape[ax + 1:]))
    col = softmax_kernel.plan(shape[ax], inner, 1, False, path)["COL"]
    used = [k for k in WG.impl._pipelines if k.startswith(f"softmax:{op}:")]
    assert any(f"SG={path and not col}" in k and f"COL={col}" in k for k in used), (used, before)


@pytest.mark.parametrize("shape", [(5, 1024), (3, 1030), (40, 64)])
def test_softmax_f16(path, shape):
    a = (R.standard_normal(shape) * 3).astype(np.float16)
    got = run(a, -1, "softmax", "f16").astype(np.float32)
    np.testing.assert_allclose(got, reference(a, -1, "softmax"), rtol=2e-3, atol=1e-3)


@pytest.mark.parametrize("n", [7, 1024, 5000])
def test_softmax_special_values(path, n):
    """numpy's answers: a NaN anywhere makes its row NaN, so does an all -inf row; -inf entries of a row
    with finite ones get 0 (also when a whole subgroup's share of the row is -inf)."""
    a = R.standard_normal((4, n)).astype(np.float32)
    a[0, n // 2] = np.nan
    a[1, :] = -np.inf
    a[2, : (3 * n) // 4] = -np.inf
    with np.errstate(invalid="ignore"):
        want = reference(a, -1, "softmax")
    got = run(a, -1, "softmax")
    assert np.isnan(got[0]).all() and np.isnan(got[1]).all()
    np.testing.assert_allclose(got[2:], want[2:], rtol=1e-5, atol=2e-6)


def test_softmax_bits_repeat(path):
    """Fixed reduction order: the same input gives the same bits (two separately built graphs)."""
    a = R.standard_normal((33, 3000)).astype(np.float32)
    assert np.array_equal(run(a, -1, "softmax"), run(a, -1, "softmax"))


CODE = r"""
import numpy as np, scellis_jupyter as sc
from scellis_jupyter.graph import functional as F
wg = sc.device("wgpu")
assert "subgroup" not in wg.impl.features and not wg.impl.subgroups, wg.impl.features
a = np.random.default_rng(0).standard_normal((19, 1100)).astype(np.float32)
got = sc.Tensor(F.softmax(sc.tensor(a, device=wg).node, -1), wg).numpy()
x = a.astype(np.float64); e = np.exp(x - x.max(1, keepdims=True)); want = e / e.sum(1, keepdims=True)
np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6)
assert all("SG=False" in k for k in wg.impl._pipelines if k.startswith("softmax:"))
print("NO-SUBGROUPS-OK")
"""


def test_subgroups_off_by_environment(run_python):
    r = run_python(CODE, SCELLIS_WGPU_SUBGROUPS="off", SCELLIS_DEVICE="wgpu")
    assert "NO-SUBGROUPS-OK" in r.stdout, r.stdout[-2000:] + r.stderr[-3000:]


def test_subgroups_bad_value_is_refused(run_python):
    r = run_python("import scellis_jupyter as sc\ntry:\n    sc.device('wgpu').impl\nexcept sc.ScellisError as e:\n"
                   "    print('ERR', e)\n", SCELLIS_WGPU_SUBGROUPS="maybe")
    assert "ERR" in r.stdout and "SCELLIS_WGPU_SUBGROUPS='maybe'" in r.stdout, r.stdout + r.stderr[-2000:]
