"""Casts to and from i8 (packed 4 per word) on wgpu: bit-identical with the reference _cast."""
import numpy as np
import pytest

from scellis_jupyter.graph import functional as F

from fixtures.devices import both


R = np.random.default_rng(10)


@pytest.mark.parametrize("n", [0, 1, 3, 4, 5, 37, 1031])
@pytest.mark.parametrize("dtype", ["f32", "f16", "i32"])
def test_to_i8(n, dtype):
    a = R.standard_normal(n) * 200
    if dtype == "i32":
        a = R.integers(-100000, 100000, n).astype(np.int32)
    else:
        a = a.astype(np.float16 if dtype == "f16" else np.float32)
        if n >= 5:
            a[:5] = [np.nan, np.inf, -np.inf, -0.99, 127.9]
    g, r = both(lambda x: F.cast(x, "i8"), a)
    assert g.dtype == r.dtype == np.int8 and np.array_equal(g, r)


@pytest.mark.parametrize("shape", [(0,), (1,), (3, 5), (2, 3, 7), (1030,)])
@pytest.mark.parametrize("dtype", ["f32", "f16", "i32"])
def test_from_i8(shape, dtype):
    a = R.integers(-128, 128, shape).astype(np.int8)
    g, r = both(lambda x: F.cast(x, dtype), a)
    assert g.dtype == r.dtype and np.array_equal(g, r)
    g, r = both(lambda x: F.cast(F.cast(x, dtype), "i8"), a)   # round trip inside one program (arena)
    assert np.array_equal(g, r) and np.array_equal(g, a)
