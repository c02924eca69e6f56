"""The column layout of kernels/reduce.wgsl (a contiguous kept run: bias / norm-weight gradients, sums over
leading axes), one and two stages, with and without subgroups, against float64 / exact numpy.

Shapes: odd column counts (a partial column block), kept runs merged from several dims, reduced boxes of
several dims, columns just long enough for two stages (R = 2 * COL_ROWS) and far past it, f16 inputs.
Tolerances: f32 sums rtol/atol 1e-6 * sqrt(R) against float64; f16 inputs sum in f32 and round once:
rtol 1e-3 (atol 1e-3 of the largest |sum|); integer sums and every max are exact. Determinism: the same
program twice gives identical bits.
"""
import numpy as np
import pytest

from scellis_jupyter.backends.wgpu.kernels import reduce as red
from scellis_jupyter.graph import functional as F

from fixtures.devices import WG, needs_wgpu
from reduce_checks import check_f16_sum, check_sum_and_max, on_wgpu, sample

pytestmark = needs_wgpu
R = np.random.default_rng(41)

CASES = [((17, 33), (0,)), ((1000, 100), (0,)), ((512, 64), (0,)), ((511, 384), (0,)), ((4100, 385), (0,)),
         ((6, 7, 50, 40), (0, 1)), ((9, 300, 2, 48), (0, 1)), ((5, 2, 41, 70), (0, 2)), ((40000, 96), (0,)),
         ((3, 64, 5, 32), (0, 2))]


@pytest.mark.parametrize("shape,axes", CASES, ids=[f"{s}-{a}" for s, a in CASES])
@pytest.mark.parametrize("dtype", ["f32", "i32"])
def test_column_sums_and_max(path, shape, axes, dtype):
    check_sum_and_max(sample(R, shape, dtype), axes)
    assert any(":COL=True" in k for k in WG.impl._pipelines)


@pytest.mark.parametrize("shape", [(300, 64), (2000, 130), (20000, 40)])
def test_column_f16(path, shape):
    check_f16_sum(R.standard_normal(shape).astype(np.float16), (0,))


def test_two_stages_when_columns_are_long():
    """Few column blocks of long columns take two dispatches (pieces, then their sum); a short column one."""
    assert red.col_pieces(384, 16384) > 1 and red.col_pieces(384, 2 * red.COL_ROWS - 1) == 1
    assert red.col_pieces(64 * red.COL_TARGET, 100000) == 1
    a = R.standard_normal((16384, 384)).astype(np.float32)
    be = WG.impl
    before = be.dispatches
    got = on_wgpu(lambda x: F.sum_(x, 0), a)
    assert be.dispatches - before == 2
    np.testing.assert_allclose(got, a.astype(np.float64).sum(0), rtol=1e-6 * 128, atol=1e-6 * 128)
    before = be.dispatches
    on_wgpu(lambda x: F.sum_(x, 0), a[:100])
    assert be.dispatches - before == 1


def test_nan_and_inf_reach_the_column():
    a = R.standard_normal((3000, 70)).astype(np.float32)
    a[2999, 5] = np.nan
    a[1500, 6] = np.inf
    s = on_wgpu(lambda x: F.sum_(x, 0), a)
    m = on_wgpu(lambda x: F.max_(x, 0), a)
    assert np.isnan(s[5]) and np.isnan(m[5]) and s[6] == np.inf and m[6] == np.inf
    assert np.isfinite(s[[0, 7, 69]]).all()


@pytest.mark.parametrize("shape", [(16384, 384), (700, 2, 64)])
def test_columns_are_deterministic(shape):
    a = R.standard_normal(shape).astype(np.float32)
    one = on_wgpu(lambda x: F.sum_(x, 0), a)
    two = on_wgpu(lambda x: F.sum_(x, 0), a)
    assert one.tobytes() == two.tobytes()
