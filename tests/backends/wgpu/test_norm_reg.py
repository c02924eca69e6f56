"""The one-read layer_norm / rms_norm (REG in kernels/norm.wgsl: a row's chunks kept in registers from the
statistics to the write), with and without subgroups, against float64 numpy: rows of 8192 x 1024 and
65536 x 256 in miniature (vec4, a workgroup or a subgroup a row), odd lengths (scalar chunks), a row too
long for it (two reads), a mean far from 0, f16 storage, and bit-identical reruns.
Tolerances (f32 against float64): rtol 1e-5, atol 1e-5 of the output scale; f16: rtol/atol 2e-3.
"""
import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.backends.wgpu.kernels import norm as nk
from scellis_jupyter.graph import functional as F

from fixtures.devices import WG, needs_wgpu

pytestmark = [needs_wgpu,
              pytest.mark.usefixtures("row_reg_on")]   # the one-read path (off by default)
R = np.random.default_rng(29)
SHAPES = [(8, 1024), (37, 256), (5, 1027), (3, 4096), (11, 60), (2, 5001)]


def want(x, op, w, b, eps=1e-5):
    x = x.astype(np.float64)
    if op == "layer_norm":
        d = x - x.mean(-1, keepdims=True)
        y = d / np.sqrt((d * d).mean(-1, keepdims=True) + eps)
    else:
        y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    y = y * w.astype(np.float64)
    return y + b.astype(np.float64) if op == "layer_norm" else y


def got(x, op, w, b, dtype=None):
    def t(a):
        n = sc.tensor(a, device=WG)
        return (n.to(dtype) if dtype else n).node
    n = x.shape[-1]
    node = F.layer_norm(t(x), (n,), t(w), t(b), 1e-5) if op == "layer_norm" else F.rms_norm(t(x), (n,), t(w), 1e-5)
    return sc.Tensor(node, WG).numpy()


@pytest.mark.parametrize("shape", SHAPES, ids=[str(s) for s in SHAPES])
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_one_read_rows(path, shape, op):
    x = (R.standard_normal(shape) * 3 + 50).astype(np.float32)
    w = R.standard_normal(shape[-1]).astype(np.float32)
    b = R.standard_normal(shape[-1]).astype(np.float32)
    y = got(x, op, w, b)
    scale = np.abs(w).max() + np.abs(b).max()
    np.testing.assert_allclose(y, want(x, op, w, b), rtol=1e-5, atol=1e-5 * scale)
    n = shape[-1]
    q = 4 if n % 4 == 0 else 1
    short = n // q <= nk.SHORT_ROW
    wg = nk.WG if short else nk.row_threads(n // q)
    assert (nk.reg_chunks(n // q, wg, short, path) <= nk.KREG_MAX) == (shape != (2, 5001))
    assert any("REG=True" in k for k in WG.impl._pipelines if k.startswith("norm:"))


def test_f16_rows(path):
    x = R.standard_normal((9, 512)).astype(np.float16)
    w = R.standard_normal(512).astype(np.float16)
    b = R.standard_normal(512).astype(np.float16)
    y = got(x, "layer_norm", w, b, dtype="f16")
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float64), want(x, "layer_norm", w, b), rtol=2e-3,
                               atol=2e-3 * (np.abs(w).max() + np.abs(b).max()))


def test_rerun_is_bit_identical():
    x = R.standard_normal((64, 1024)).astype(np.float32)
    w, b = R.standard_normal(1024).astype(np.float32), R.standard_normal(1024).astype(np.float32)
    assert got(x, "layer_norm", w, b).tobytes() == got(x, "layer_norm", w, b).tobytes()
