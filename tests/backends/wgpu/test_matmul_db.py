"""The double-buffered tile variants (matmul.wgsl loop_db): the same products in the same order as their
single-buffered siblings, so big_db must give big_p's bits exactly (and be within the f32 bound of
float64 on every edge); the table takes big_db only where the device's workgroup memory holds it."""
import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.backends.wgpu.kernels import matmul_tune as T
from scellis_jupyter.graph import functional as F

from fixtures.devices import WG, needs_wgpu

R = np.random.default_rng(41)


def test_the_table_takes_big_db_only_where_it_fits(monkeypatch):
    need = T.smem_bytes("big_db")
    assert 16384 < need <= 32768
    assert T.default_config(1024, 1024, 1, 512) == ("big_p", 1)                  # WebGPU's default 16 KiB
    assert T.default_config(1024, 1024, 1, 512, smem=need) == ("big_db", 1)
    assert T.default_config(384, 1536, 1, 16384, smem=need)[0] == "big_db"       # the split big tile too
    monkeypatch.setenv("SCELLIS_MATMUL_DB", "off")
    assert T.default_config(1024, 1024, 1, 512, smem=need) == ("big_p", 1)
    # the tuner never times a variant the device cannot hold
    assert not any(v.endswith("_db") for v, _ in T.candidates("f32", 512, 512, 512, 1, True, "prod", 1 << 27, 16384))
    assert any(v == "big_db" for v, _ in T.candidates("f32", 512, 512, 512, 1, True, "prod", 1 << 27, need))


def _mm(a, b, ta, tb, forced, monkeypatch):
    monkeypatch.setenv("SCELLIS_MATMUL_TUNE", forced)
    WG.impl.flush()
    WG.impl._records.clear()
    WG.impl._prog_params.clear()
    x, y = sc.tensor(a, device=WG), sc.tensor(b, device=WG)
    na = F.permute(x.node, (1, 0)) if ta else x.node
    nb = F.permute(y.node, (1, 0)) if tb else y.node
    return sc.Tensor(F.matmul(na, nb), WG).numpy()


@needs_wgpu
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True)])
def test_big_db_gives_big_p_bits_on_ragged_shapes(ta, tb, monkeypatch):
    if int(WG.impl.limits.get("max-compute-workgroup-storage-size", 0)) < T.smem_bytes("big_db"):
        pytest.skip("the device's workgroup memory does not hold big_db")
    m, n, k = 131, 133, 45                  # ragged in every dim: partial tiles and a partial last k-tile
    a = R.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    b = R.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    got = _mm(a, b, ta, tb, "big_db", monkeypatch)
    ref = _mm(a, b, ta, tb, "big_p", monkeypatch)
    assert np.array_equal(got.view(np.uint32), ref.view(np.uint32))
    a64 = a.astype(np.float64).T if ta else a.astype(np.float64)
    b64 = b.astype(np.float64).T if tb else b.astype(np.float64)
    tol = 1e-4 * np.sqrt((a64 * a64) @ (b64 * b64)) + 1e-30
    assert np.all(np.abs(got - a64 @ b64) <= tol)
    assert any(key.startswith("matmul:big_db") for key in WG.impl._pipelines)
