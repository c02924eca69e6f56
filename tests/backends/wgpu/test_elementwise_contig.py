"""The rank-1 (CONTIG) path of kernels/elementwise.wgsl and kernels/fused.wgsl: EPT elements an
invocation, unrolled when all are in range, a guarded loop for the tail. Sizes put the boundary between
the two everywhere that matters (1, below one workgroup's 1024, exactly 1024, just over, a ragged 70 001);
operands: contiguous, evenly strided (a step-2 slice), a scalar, f16, and a rank-2 broadcast (the general
path, for contrast). Reference: float64 numpy of the same op; tolerances rtol 1e-6 / atol 1e-6 for add
and mul (one f32 rounding), 3e-6 for the gelu chain (erf in f32), f16 within one f16 ulp (rtol 1e-3).
"""
import numpy as np
import pytest
from math import erf

import scellis_jupyter as sc
from scellis_jupyter.graph import functional as F

from fixtures.devices import WG, needs_wgpu

pytestmark = needs_wgpu
R = np.random.default_rng(17)
SIZES = [1, 1000, 1024, 1025, 5000, 70001]
_erf = np.vectorize(erf)


def on_wgpu(build, *arrays):
    nodes = [sc.tensor(a, device=WG).node for a in arrays]
    return sc.Tensor(build(*nodes), WG).numpy()


@pytest.mark.parametrize("n", SIZES)
def test_add_contiguous(n):
    a, b = (R.standard_normal(n).astype(np.float32) for _ in range(2))
    got = on_wgpu(F.add, a, b)
    np.testing.assert_allclose(got, a.astype(np.float64) + b, rtol=1e-6, atol=1e-6)
    assert any(k.startswith("elementwise:True:") for k in WG.impl._pipelines)


@pytest.mark.parametrize("n", SIZES)
def test_fused_chain_contiguous(n):
    a, b, c = (R.standard_normal(n).astype(np.float32) for _ in range(3))
    got = on_wgpu(lambda x, y, z: F.gelu(F.add(F.mul(x, y), z)), a, b, c)
    t = a.astype(np.float64) * b + c
    want = 0.5 * t * (1 + _erf(t / np.sqrt(2)))
    np.testing.assert_allclose(got, want, rtol=3e-6, atol=3e-6)
    assert any(k.startswith("fused:True:") for k in WG.impl._pipelines)


@pytest.mark.parametrize("n", [3, 2049, 9000])
def test_strided_and_scalar_operands(n):
    a = R.standard_normal(2 * n).astype(np.float32)
    b = R.standard_normal(n).astype(np.float32)
    got = on_wgpu(lambda x, y: F.mul(F.slice_(x, [0], [2 * n], [2]), F.add(y, F.scalar(2.5))), a, b)
    np.testing.assert_allclose(got, a[::2].astype(np.float64) * (b.astype(np.float64) + 2.5), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("n", [7, 4100])
def test_f16_contiguous(n):
    a, b = (R.standard_normal(n).astype(np.float16) for _ in range(2))
    ta, tb = (sc.tensor(x, device=WG).to("f16") for x in (a, b))
    got = sc.Tensor(F.add(ta.node, tb.node), WG).numpy()
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), a.astype(np.float64) + b, rtol=1e-3, atol=1e-3)


def test_rank2_broadcast_general_path():
    a = R.standard_normal((300, 7)).astype(np.float32)
    b = R.standard_normal(7).astype(np.float32)
    got = on_wgpu(F.add, a, b)
    np.testing.assert_allclose(got, a.astype(np.float64) + b, rtol=1e-6, atol=1e-6)
    assert any(k.startswith("elementwise:False:") for k in WG.impl._pipelines)
