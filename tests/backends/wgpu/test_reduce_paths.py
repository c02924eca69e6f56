"""Every layout of kernels/reduce.wgsl, with and without subgroups, against float64 / exact numpy.

Layouts: one invocation per output (R <= 16), a subgroup per output (SUBROW: 16 < R <= 1024 with
subgroups; 8 outputs a workgroup, so 37 outputs leave the last workgroup partly idle), a workgroup per
output (ROW), and two stages for few outputs of long boxes (SPLIT: R >= 65536; a contiguous, a strided
and a full reduction). reduce_max keeps numpy's NaN (subgroupMax alone may drop it).
Tolerances: f32 sums rtol/atol 1e-6 * sqrt(R) against float64 (f32 rounding in another order); f16
inputs sum in f32 and round once: rtol 1e-3; integer sums and every max are exact.
"""
import numpy as np
import pytest

from scellis_jupyter.errors import ScellisError
from scellis_jupyter.graph import functional as F

from fixtures.devices import WG, needs_wgpu
from reduce_checks import check_f16_sum, check_sum_and_max, on_wgpu, sample

pytestmark = needs_wgpu
R = np.random.default_rng(23)

CASES = [((37, 17), (1,)), ((37, 256), (1,)), ((9, 1000), (1,)), ((5, 1025), (1,)), ((3, 5000), (1,)),
         ((40, 33), (0,)), ((6, 7, 50), (0, 2)), ((70001,), None), ((3, 200000), (1,)), ((100000, 2), (0,)),
         ((2, 300, 250), (1, 2))]


@pytest.mark.parametrize("shape,axes", CASES, ids=[f"{s}-{a}" for s, a in CASES])
@pytest.mark.parametrize("dtype", ["f32", "i32"])
def test_reduce_layouts(path, shape, axes, dtype):
    n_red = check_sum_and_max(sample(R, shape, dtype), axes)
    used = [k for k in WG.impl._pipelines if k.startswith("reduce:")]
    assert any(f"SG={path}" in k for k in used) or n_red <= 16
    if n_red >= 65536:
        assert any("SPLIT=True" in k for k in used)


@pytest.mark.parametrize("shape,axes", [((37, 256), (1,)), ((3, 5000), (1,)), ((3, 200000), (1,))])
def test_reduce_f16(path, shape, axes):
    check_f16_sum(R.standard_normal(shape).astype(np.float16), axes)


@pytest.mark.parametrize("shape", [(9, 200), (9, 5000), (2, 100000)])
def test_max_keeps_nan(path, shape):
    a = R.standard_normal(shape).astype(np.float32)
    a[3 % shape[0], 17] = np.nan
    got = on_wgpu(lambda x: F.max_(x, 1), a)
    np.testing.assert_array_equal(got, a.max(axis=1))


def test_reduce_bits_repeat(path):
    a = R.standard_normal((4, 150000)).astype(np.float32)
    assert np.array_equal(on_wgpu(lambda x: F.sum_(x, 1), a), on_wgpu(lambda x: F.sum_(x, 1), a))
    b = R.standard_normal((50, 700)).astype(np.float32)
    assert np.array_equal(on_wgpu(lambda x: F.sum_(x, 1), b), on_wgpu(lambda x: F.sum_(x, 1), b))


def _subrow_keys(a):
    WG.impl._pipelines.clear()
    WG.impl._records.clear()
    got = on_wgpu(lambda x: F.sum_(x, 1), a)
    np.testing.assert_allclose(got, a.astype(np.float64).sum(1), rtol=1e-6 * np.sqrt(a.shape[1]), atol=1e-5)
    return [k for k in WG.impl._pipelines if k.startswith("reduce:")]


def test_rows_up_to_subrow_max_take_a_subgroup_each(monkeypatch):
    """SUBROW_MAX (1024) is the longest row a subgroup takes; SCELLIS_SUBROW_MAX moves the line (for
    measuring it), and a value that is not a whole number is refused, naming the variable."""
    if not getattr(WG.impl, "subgroups", False):
        pytest.skip("the adapter has no subgroups")
    from scellis_jupyter.backends.wgpu.kernels import reduce as RD
    a = R.standard_normal((9, 1000)).astype(np.float32)
    assert RD.subrow_max() == RD.SUBROW_MAX == 1024
    assert any("SUBROW=True" in k for k in _subrow_keys(a))
    assert not any("SUBROW=True" in k for k in _subrow_keys(R.standard_normal((9, 1025)).astype(np.float32)))
    monkeypatch.setenv("SCELLIS_SUBROW_MAX", "256")
    assert not any("SUBROW=True" in k for k in _subrow_keys(a))
    monkeypatch.setenv("SCELLIS_SUBROW_MAX", "lots")
    with pytest.raises(ScellisError, match="SCELLIS_SUBROW_MAX"):
        RD.subrow_max()
