"""The vec4 elementwise kernel (kernels/elementwise_vec.wgsl): contiguous elementwise ops and fused groups
four elements a chunk. Each lane runs the scalar kernels' instruction list, so a length that is a
multiple of 4 (vec4 path) must give exactly the bits of the same values one element longer (scalar
path); exactly rounded ops (add, mul, compare, casts) also equal numpy bit for bit, the others match
numpy float64 at rtol 1e-5 (f32) / 1e-3 (f16). Covers f32, f16, i32, bool outputs, broadcast scalars,
more than 3 vector inputs (two chunks an invocation) and sizes crossing the unrolled fast path."""
import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.graph import functional as F

from fixtures.devices import WG, needs_wgpu

pytestmark = needs_wgpu
R = np.random.default_rng(8)
SIZES = [4, 1024, 4096 + 8, 3 * 256 * 16 + 4, 100000]


def run(build, *arrays, dtype=None):
    nodes = [sc.tensor(a, device=WG).node for a in arrays]
    if dtype:
        nodes = [F.cast(n, dtype) for n in nodes]
    return sc.Tensor(build(*nodes), WG).numpy()


def vec_and_scalar(build, n, k=2, dtype=None, kind="f32"):
    """(vec4 result of length n, scalar-path result of the same values, one element longer, cut to n)."""
    if kind == "i32":
        arrays = [R.integers(-1000, 1000, n + 1).astype(np.int32) for _ in range(k)]
    else:
        arrays = [R.standard_normal(n + 1).astype(np.float32) for _ in range(k)]
    before = sum(1 for key in WG.impl._pipelines if key.startswith("elementwise_vec"))
    a = run(build, *[x[:n] for x in arrays], dtype=dtype)
    b = run(build, *arrays, dtype=dtype)[:n]
    return a, b, [x[:n] for x in arrays], before


@pytest.mark.parametrize("n", SIZES)
def test_binary_and_unary_bits(n):
    a, b, (x, y), _ = vec_and_scalar(F.add, n)
    assert a.tobytes() == b.tobytes() and np.array_equal(a, x + y)
    a, b, (x, y), _ = vec_and_scalar(F.lt, n)
    assert np.array_equal(a, b) and np.array_equal(a, x < y)
    a, b, (x,), _ = vec_and_scalar(F.exp, n, k=1)
    assert a.tobytes() == b.tobytes()
    np.testing.assert_allclose(a, np.exp(x.astype(np.float64)), rtol=1e-5)
    assert any(k.startswith("elementwise_vec:elementwise") for k in WG.impl._pipelines)


@pytest.mark.parametrize("n", [8, 4096, 70000])
def test_fused_groups_bits(n):
    def chain(x, y):
        return F.sub(F.mul(F.tanh(x), 3.0), F.div(y, F.add(F.abs_(x), 1.0)))
    a, b, (x, y), _ = vec_and_scalar(chain, n)
    assert a.tobytes() == b.tobytes()
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    np.testing.assert_allclose(a, np.tanh(x64) * 3 - y64 / (np.abs(x64) + 1), rtol=1e-5, atol=1e-6)

    def five(p, q, r, s, t):                       # five vector inputs: two chunks an invocation
        return F.add(F.mul(p, q), F.sub(F.mul(r, s), t))
    a, b, xs, _ = vec_and_scalar(five, n, k=5)
    assert a.tobytes() == b.tobytes()
    np.testing.assert_allclose(a, xs[0] * xs[1] + (xs[2] * xs[3] - xs[4]), rtol=1e-6, atol=1e-6)
    assert any(k.startswith("elementwise_vec:fused:2:") for k in WG.impl._pipelines)


def test_f16_and_i32():
    a, b, (x, y), _ = vec_and_scalar(lambda p, q: F.mul(F.add(p, q), p), 4100, dtype="f16")
    assert a.dtype == np.float16 and a.tobytes() == b.tobytes()
    x16, y16 = x.astype(np.float16).astype(np.float64), y.astype(np.float16).astype(np.float64)
    np.testing.assert_allclose(a.astype(np.float64), (x16 + y16) * x16, rtol=2e-3, atol=2e-3)
    a, b, (x, y), _ = vec_and_scalar(lambda p, q: F.sub(F.mul(p, q), p), 4100, kind="i32")
    assert a.dtype == np.int32 and np.array_equal(a, b) and np.array_equal(a, x * y - x)


def test_broadcast_scalar_operand():
    x = R.standard_normal(4096).astype(np.float32)
    s = np.array([1.5], np.float32)
    got = run(lambda p, q: F.mul(p, q), x, s)
    assert np.array_equal(got, x * s[0])
    assert any(":vvs:" in k or ":vsv:" in k for k in WG.impl._pipelines if k.startswith("elementwise_vec"))


def test_rerun_is_bit_identical():
    x, y = (R.standard_normal(50000).astype(np.float32) for _ in range(2))
    a = run(lambda p, q: F.gelu(F.add(p, q)), x, y)
    b = run(lambda p, q: F.gelu(F.add(p, q)), x, y)
    assert a.tobytes() == b.tobytes()
