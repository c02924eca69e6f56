"""The one-read softmax (REG in kernels/softmax.wgsl: a row's chunks kept in registers between the
reduction and the write), with and without subgroups, against float64 numpy; rows too long for it
(the two-read path), masked (-inf) rows, NaN, f16, and bit-identical reruns.
Tolerances (f32 against float64): softmax rtol 1e-5, atol 2e-6; log_softmax rtol 1e-5, atol 2e-5;
f16 storage rtol 2e-3, atol 1e-3.
"""
import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.backends.wgpu.kernels import softmax as sk
from scellis_jupyter.graph import functional as F

from fixtures.devices import WG, needs_wgpu

pytestmark = [needs_wgpu,
              pytest.mark.usefixtures("row_reg_on")]   # the one-read path (off by default)
R = np.random.default_rng(17)
SHAPES = [(8, 1024), (5, 1027), (37, 256), (11, 60), (3, 4096), (2, 5001), (9, 130)]


def ref(x, log):
    x = x.astype(np.float64)
    m = x.max(-1, keepdims=True)
    e = np.exp(x - m)
    s = e.sum(-1, keepdims=True)
    return (x - m - np.log(s)) if log else e / s


@pytest.mark.parametrize("shape", SHAPES, ids=[str(s) for s in SHAPES])
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_one_read_rows(path, shape, log):
    x = (R.standard_normal(shape) * 4).astype(np.float32)
    x[0, :] = -np.inf                       # a fully masked row: 0/0 as in numpy (NaN), nothing else touched
    x[-1, 1] = -np.inf
    got = sc.Tensor((F.log_softmax if log else F.softmax)(sc.tensor(x, device=WG).node), WG).numpy()
    want = ref(x[1:], log)
    np.testing.assert_allclose(got[1:], want, rtol=1e-5, atol=2e-5 if log else 2e-6)
    assert np.isnan(got[0]).all()
    k = sk.plan(shape[1], 1, shape[0], shape[1] % 4 == 0, path)
    assert k["REG"] == (shape != (2, 5001))           # 5001 scalar chunks over 256 lanes: 20 > KREG_MAX
    assert any("REG=True" in key for key in WG.impl._pipelines if key.startswith("softmax"))


def test_nan_and_f16(path):
    x = R.standard_normal((6, 1024)).astype(np.float32)
    x[2, 100] = np.nan
    got = sc.Tensor(F.softmax(sc.tensor(x, device=WG).node), WG).numpy()
    assert np.isnan(got[2]).all() and np.isfinite(got[[0, 1, 3, 4, 5]]).all()
    h = R.standard_normal((7, 512)).astype(np.float16)
    got = sc.Tensor(F.softmax(sc.tensor(h, device=WG).to("f16").node), WG).numpy()
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), ref(h, False), rtol=2e-3, atol=1e-3)


def test_rerun_is_bit_identical():
    x = R.standard_normal((64, 1024)).astype(np.float32)
    a = sc.Tensor(F.softmax(sc.tensor(x, device=WG).node), WG).numpy()
    b = sc.Tensor(F.softmax(sc.tensor(x, device=WG).node), WG).numpy()
    assert a.tobytes() == b.tobytes()



def test_row_reg_off_takes_the_two_read_path(monkeypatch):
    """Without SCELLIS_ROW_REG=on (the default) softmax and the norms take the two-read path, with the same
    values within the tolerances above (layer_norm: rtol/atol 1e-4)."""
    assert sk.plan(1024, 1, 8, True, False)["REG"]
    monkeypatch.delenv("SCELLIS_ROW_REG")
    assert not sk.plan(1024, 1, 8, True, False)["REG"]
    x = R.standard_normal((7, 1024)).astype(np.float32)      # a shape of its own: a fresh pipeline
    got = sc.Tensor(F.softmax(sc.tensor(x, device=WG).node), WG).numpy()
    np.testing.assert_allclose(got, ref(x, False), rtol=1e-5, atol=2e-6)
    w = R.standard_normal(1024).astype(np.float32)
    got = sc.Tensor(F.layer_norm(sc.tensor(x, device=WG).node, (1024,), sc.tensor(w, device=WG).node), WG).numpy()
    x64 = x.astype(np.float64)
    want = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5) * w
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    keys = [k for k in WG.impl._pipelines if k.startswith(("softmax", "norm"))]
    assert any("REG=False" in k for k in keys if k.startswith("norm")) and any("REG=False" in k for k in keys)
