"""gather / scatter_add on wgpu vs the reference device: bit-identical (fixed order, per-add rounding).

Out-of-range indices: the reference raises; wgpu clamps (gather) / drops (scatter_add) unless
SCELLIS_CHECK_INDICES=1, which checks leaf indices host-side and raises KernelError like the reference.
"""
import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.errors import KernelError
from scellis_jupyter.graph import functional as F

from fixtures.devices import both

WG, REF = sc.device("wgpu"), sc.device("reference")


R = np.random.default_rng(9)
SHAPES = [(5, 7, 3), (1,), (13, 2), (2, 1, 11), (3, 5, 2, 7)]


def _arr(shape, dtype):
    if dtype == "i32":
        return R.integers(-50, 50, shape).astype(np.int32)
    return R.standard_normal(shape).astype(np.float16 if dtype == "f16" else np.float32)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", ["f32", "f16", "i32"])
def test_gather_scatter_match_reference(shape, dtype):
    for ax in range(len(shape)):
        x = _arr(shape, dtype)
        ishape = [max(1, s - 1) for s in shape]
        ishape[ax] = 2 * shape[ax] + 1
        idx = R.integers(0, shape[ax], ishape).astype(np.int32)
        g, r = both(lambda a, i: F.gather(a, ax, i), x, idx)
        assert g.shape == r.shape and np.array_equal(g, r)
        src = _arr(ishape, dtype)
        g, r = both(lambda b, i, s: F.scatter_add(b, ax, i, s), _arr(shape, dtype), idx, src)
        assert g.shape == r.shape and np.array_equal(g, r)


def test_zero_sizes():
    x = _arr((4, 3), "f32")
    g, r = both(lambda a, i: F.gather(a, 0, i), x, np.zeros((0, 3), np.int32))
    assert g.shape == r.shape == (0, 3)
    g, r = both(lambda b, i, s: F.scatter_add(b, 0, i, s), x, np.zeros((0, 3), np.int32), np.zeros((0, 3), np.float32))
    assert np.array_equal(g, r) and np.array_equal(g, x)


def test_out_of_range(monkeypatch):
    x = _arr((4, 3), "f32")
    bad = np.array([[0, 4, -1]], np.int32)

    def run(dev):
        return sc.Tensor(F.gather(sc.tensor(x, device=dev).node, 0, sc.tensor(bad, device=dev).node), dev).numpy()
    with pytest.raises(KernelError):
        run(sc.device("reference"))
    monkeypatch.delenv("SCELLIS_CHECK_INDICES", raising=False)
    got = run(WG)   # documented: clamped on the device
    np.testing.assert_array_equal(got, x[[0, 3, 0], [0, 1, 2]][None])
    monkeypatch.setenv("SCELLIS_CHECK_INDICES", "1")
    with pytest.raises(KernelError):
        run(WG)
