"""The double-buffered tile variants (matmul.wgsl loop_db): the same products in the same order as their
single-buffered siblings, so big_db must give big_p's bits exactly (and be within the f32 bound of
float64 on every edge); the table takes big_db only where the device's workgroup memory holds it, and huge_db
(128x256) only for read-only operands of a matmul compiled unchecked, with enough of its tiles, a K of at least
HUGE_MIN_K and no more padded columns than 128-wide tiles."""
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


def _same_bits(variant, ref_variant, m, n, k, ta, tb, monkeypatch):
    """`variant` gives `ref_variant`'s bits on an m x n x k product (A / B stored transposed for ta / tb), within
    f32's bound of float64."""
    if int(WG.impl.limits.get("max-compute-workgroup-storage-size", 0)) < T.smem_bytes(variant):
        pytest.skip(f"the device's workgroup memory does not hold {variant}")
    a = R.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    b = R.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    got = _mm(a, b, ta, tb, variant, monkeypatch)
    ref = _mm(a, b, ta, tb, ref_variant, monkeypatch)
    assert np.array_equal(got.view(np.uint32), ref.view(np.uint32))
    a64 = a.astype(np.float64).T if ta else a.astype(np.float64)
    b64 = b.astype(np.float64).T if tb else b.astype(np.float64)
    tol = 1e-4 * np.sqrt((a64 * a64) @ (b64 * b64)) + 1e-30
    assert np.all(np.abs(got - a64 @ b64) <= tol)
    assert any(key.startswith(f"matmul:{variant}:") for key in WG.impl._pipelines)


@needs_wgpu
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True)])
def test_big_db_gives_big_p_bits_on_ragged_shapes(ta, tb, monkeypatch):
    _same_bits("big_db", "big_p", 131, 133, 45, ta, tb, monkeypatch)     # partial tiles and a partial last k-tile


def test_the_table_takes_huge_db_only_for_read_only_unchecked_products_of_enough_tiles_and_k():
    need = T.smem_bytes("huge_db")
    assert T.smem_bytes("big_db") < need <= 32768
    assert T.default_config(2048, 2048, 1, 2048, smem=need, huge=True) == ("huge_db", 1)     # 128 tiles of 128x256
    assert T.default_config(2048, 2048, 1, 2048, smem=need) == ("big_db", 1)                 # not read-only + unchecked
    assert T.default_config(2048, 1792, 1, 2048, smem=need, huge=True) == ("big_db", 1)      # 112 tiles: too few
    assert T.default_config(128, 256, 128, 512, smem=need, huge=True) == ("huge_db", 1)      # batched tiles count
    assert T.default_config(128, 256, 128, 511, smem=need, huge=True) == ("big_db", 1)       # K too short
    assert T.default_config(4096, 4096, 32, 64, smem=need, huge=True) == ("big_db", 1)       # attention's scores
    assert T.default_config(16384, 384, 1, 1536, smem=need, huge=True) == ("big_db", 1)      # pads 128 more columns
    assert T.default_config(16384, 1152, 1, 1536, smem=need, huge=True) == ("big_db", 1)
    assert T.default_config(16384, 1792, 1, 1536, smem=need, huge=True) == ("huge_db", 1)    # 7 x 256 = 14 x 128
    assert T.default_config(2048, 2048, 1, 2048, smem=need - 16, huge=True) == ("big_db", 1)  # does not fit
    assert T.default_config(2048, 2048, 1, 2048, "f16", smem=need, huge=True, packed=True)[0] == "big"


@needs_wgpu
def test_huge_ok_follows_the_binding_and_the_checks(monkeypatch):
    monkeypatch.setattr(WG.impl, "shader_checks", "auto")
    monkeypatch.setattr(WG.impl, "backend_type", "Vulkan")
    if WG.impl.implementation == "dawn":      # Dawn drops checks per device, only when every kernel is asked to
        assert not T.huge_ok(WG.impl, True)
        monkeypatch.setattr(WG.impl, "shader_checks", "none")
    assert T.huge_ok(WG.impl, True) and not T.huge_ok(WG.impl, False)
    monkeypatch.setattr(WG.impl, "shader_checks", "naga")
    assert not T.huge_ok(WG.impl, True)
    assert not T.huge_ok(object(), True)          # a backend that cannot say how it compiles


@needs_wgpu
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True)])
def test_huge_db_gives_big_db_bits_on_ragged_shapes(ta, tb, monkeypatch):
    _same_bits("huge_db", "big_db", 131, 261, 45, ta, tb, monkeypatch)   # a partial 128x256 tile each way


@needs_wgpu
def test_the_table_runs_huge_db_for_a_large_eager_product(monkeypatch):
    """Unforced, on llvmpipe (a Vulkan adapter: the matmul compiles unchecked under `auto`), an eager product of
    128 tiles of 128x256 with its operands apart from C runs huge_db read-only, within f32's bound of float64."""
    if int(WG.impl.limits.get("max-compute-workgroup-storage-size", 0)) < T.smem_bytes("huge_db"):
        pytest.skip("the device's workgroup memory does not hold huge_db")
    if WG.impl.implementation == "dawn":
        pytest.skip("Dawn keeps its checks under `auto`, so the table never takes huge_db there "
                    "(test_huge_ok_follows_the_binding_and_the_checks)")
    monkeypatch.setattr(WG.impl, "shader_checks", "auto")
    monkeypatch.setattr(WG.impl, "backend_type", "Vulkan")
    monkeypatch.setenv("SCELLIS_MATMUL_TUNE", "off")
    built = []
    real = WG.impl.pipeline
    monkeypatch.setattr(WG.impl, "pipeline", lambda key, src: (built.append(key), real(key, src))[1])
    m, n, k = 1024, 4096, 512
    a = R.standard_normal((m, k)).astype(np.float32)
    b = R.standard_normal((k, n)).astype(np.float32)
    got = sc.Tensor(F.matmul(sc.tensor(a, device=WG).node, sc.tensor(b, device=WG).node), WG).numpy()
    assert [key for key in built if key.startswith("matmul:")] == ["matmul:huge_db:f32+vb+roab"]
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    assert np.all(np.abs(got - a64 @ b64) <= 1e-4 * np.sqrt((a64 * a64) @ (b64 * b64)) + 1e-30)


def test_warp_tiling_needs_whole_warps_of_8_by_4_thread_tiles(monkeypatch):
    from scellis_jupyter.backends.wgpu.kernels import matmul as M
    assert "wt" in T.VARIANTS["huge_db"][5]
    src = M.source("huge_db", "f32")
    assert "t / 32u % 2u" in src and "let tx = t % 16u" not in src     # 16 x 16 threads: warps 2 across
    assert "let tx = t % 16u" in M.source("big_db", "f32")
    monkeypatch.setitem(T.VARIANTS, "odd_wt", (64, 64, 4, 4, 16, ("wt",)))   # 16 x 16 threads: fine
    assert "t / 32u % 2u" in M.source("odd_wt", "f32")
    monkeypatch.setitem(T.VARIANTS, "bad_wt", (16, 32, 4, 8, 16, ("wt",)))   # 4 thread columns: not a warp's 8
    with pytest.raises(sc.KernelError, match="cannot be warp-tiled"):
        M.source("bad_wt", "f32")
    M._source.cache_clear()
