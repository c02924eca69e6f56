"""What the reduce-layout tests (test_reduce_paths, test_reduce_columns) check alike: sum_ and max_ of one input
on wgpu against numpy, and f16 sums. Imported by basename, as pytest puts this folder on sys.path."""
import math

import numpy as np

import scellis_jupyter as sc
from scellis_jupyter.graph import functional as F


def on_wgpu(build, a: np.ndarray, dtype: str | None = None) -> np.ndarray:
    """`build(node)` on the wgpu device for the input `a` (stored as `dtype` when given), as numpy."""
    wg = sc.device("wgpu")
    t = sc.tensor(a, device=wg)
    return sc.Tensor(build(t.to(dtype).node if dtype else t.node), wg).numpy()


def sample(rng: np.random.Generator, shape: tuple, dtype: str) -> np.ndarray:
    """An input: i32 integers in [-1000, 1000) (their sums are exact), else standard normal f32."""
    if dtype == "i32":
        return rng.integers(-1000, 1000, shape).astype(np.int32)
    return rng.standard_normal(shape).astype(np.float32)


def check_sum_and_max(a: np.ndarray, axes: tuple | None) -> int:
    """sum_ and max_ over `axes` (None: all) against numpy: an i32 sum and every max exact, an f32 sum within
    rtol/atol 1e-6 * sqrt(R) of float64 (f32 rounding in another order). Returns R, the elements an output reduces."""
    ax = tuple(range(a.ndim)) if axes is None else axes
    n_red = math.prod(a.shape[i] for i in ax)
    got = on_wgpu(lambda x: F.sum_(x, axes), a)
    if a.dtype == np.int32:
        assert np.array_equal(got, a.sum(axis=ax, dtype=np.int64).astype(np.int32))
    else:
        tol = 1e-6 * math.sqrt(n_red)
        np.testing.assert_allclose(got, a.astype(np.float64).sum(axis=ax), rtol=tol, atol=tol)
    assert np.array_equal(on_wgpu(lambda x: F.max_(x, axes), a), a.max(axis=ax))
    return n_red


def check_f16_sum(a: np.ndarray, axes: tuple) -> None:
    """An f16 input sums in f32 and rounds once to an f16 result: rtol 1e-3, atol 1e-3 of the largest |sum|."""
    got = on_wgpu(lambda x: F.sum_(x, axes), a, "f16")
    assert got.dtype == np.float16
    want = a.astype(np.float64).sum(axis=axes)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-3, atol=1e-3 * np.abs(want).max())
