"""softmax / log_softmax on wgpu (one workgroup per row) vs the reference device.

Tolerances: f32 atol 2e-6 / rtol 1e-5 (exp and different summation order); f16 inputs compute in f32
and round once on store, so within one f16 ulp (rtol 2e-3, atol 1e-3).
"""
import numpy as np
import pytest

from scellis_jupyter.graph import functional as F

from fixtures.devices import both


R = np.random.default_rng(8)
CASES = [((5, 13), -1), ((7, 3), 0), ((2, 3, 37), 1), ((1,), 0), ((3, 1031), 1), ((4, 0, 3), 2),
         ((0, 5), 1), ((11, 1), 1), ((2, 17, 5), 0), ((1, 2500), 1)]


@pytest.mark.parametrize("shape,axis", CASES)
@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_matches_reference(shape, axis, dtype, op):
    a = (R.standard_normal(shape) * 3).astype(np.float16 if dtype == "f16" else np.float32)
    fn = F.softmax if op == "softmax" else F.log_softmax
    g, r = both(lambda x: fn(x, axis), a)
    assert g.shape == r.shape and g.dtype == r.dtype
    if dtype == "f32":
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=2e-6 if op == "softmax" else 1e-5)
    else:
        np.testing.assert_allclose(g.astype(np.float32), r.astype(np.float32), rtol=2e-3, atol=1e-3)
