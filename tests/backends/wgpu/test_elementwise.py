"""WGSL strided elementwise/copy kernels on wgpu (llvmpipe in CI) vs the numpy reference path."""
import os
import subprocess
import sys

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter import ops

from fixtures.devices import WG, needs_wgpu

pytestmark = needs_wgpu
REF = sc.device("reference")
R = np.random.default_rng(1)

FNS = {
    "arith": lambda a, b: (a + b) * a - b / (abs(b) + 1.0),
    "unary": lambda a, b: ops.gelu(a) + ops.tanh(b * 3.0) + ops.sigmoid(a) + ops.exp(-abs(b)) + ops.erf(a),
    "pow-log": lambda a, b: ((a * a + 0.1) ** 1.5).log() + ops.sqrt(abs(b)) + ops.maximum(a, b),
    "compare-where": lambda a, b: ops.where(a > b, a, b) + ops.where(a <= 0.0, 1.0, 0.0),
    "copies": lambda a, b: ops.concat([a.T, b.T], 0)[1::2] + 0.0,
    "bcast": lambda a, b: a[:, None, :] - b[None, :, :],
}


@pytest.mark.parametrize("name", list(FNS))
@pytest.mark.parametrize("shape", [(1, 1), (7, 13), (0, 5), (33, 65)])
def test_matches_reference(name, shape):
    a, b = R.standard_normal(shape).astype(np.float32), R.standard_normal(shape).astype(np.float32)
    got = FNS[name](sc.tensor(a, device=WG), sc.tensor(b, device=WG)).numpy()
    want = FNS[name](sc.tensor(a, device=REF), sc.tensor(b, device=REF)).numpy()
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)  # f32 transcendental ULP differences


def test_f16_and_casts():
    a = R.standard_normal((5, 9)).astype(np.float32) * 3
    for dev in (WG, REF):
        t = sc.tensor(a, device=dev)
        r = [(t.to("f16") * 2.0).to("f32").numpy(), t.to("i32").numpy(), (t > 0).to("f32").numpy()]
        if dev is WG:
            got = r
        else:
            want = r
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-3)


SPLIT = r"""
import numpy as np, scellis_jupyter as sc
from scellis_jupyter import ops
wg = sc.device("wgpu"); ref = sc.device("reference")
assert wg.impl.binding_limit == 4 * 2**20, wg.impl.binding_limit
r = np.random.default_rng(0)
a = r.standard_normal((1500, 1100)).astype(np.float32)  # 6.3 MiB > 4 MiB
b = r.standard_normal((1100,)).astype(np.float32)
f = lambda x, y: ops.concat([(x * y + 1.0).T[::2], x.T[:3]], 0) - 0.5
np.testing.assert_allclose(f(sc.tensor(a, device=wg), sc.tensor(b, device=wg)).numpy(),
                           f(sc.tensor(a, device=ref), sc.tensor(b, device=ref)).numpy(), rtol=1e-6, atol=1e-6)
print("SPLIT-OK")
"""


def test_large_tensors_split_under_lowered_binding_limit():
    env = dict(os.environ, SCELLIS_MAX_BINDING_BYTES=str(4 * 2**20))
    r = subprocess.run([sys.executable, "-c", SPLIT], env=env, capture_output=True, text=True, timeout=600)
    assert "SPLIT-OK" in r.stdout, r.stderr[-3000:]


def test_program_cache_and_one_pass():
    x = sc.tensor(R.standard_normal((4, 4)).astype(np.float32), device=WG)
    before = WG.impl.dispatches
    y1 = (x * 2.0 + 1.0).numpy()
    y2 = (x * 2.0 + 1.0).numpy()
    np.testing.assert_array_equal(y1, y2)  # debug tier: bit-identical rerun
    assert WG.impl.dispatches - before == 2   # fused: x * 2 + 1 is one dispatch per run
