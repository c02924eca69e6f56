"""The subgroup-matrix matmul (kernels/matmul_sgm.wgsl) through its emulation: the same kernel template with plain
WGSL standing in for the matrix types and builtins (SCELLIS_WGPU_SUBGROUP_MATRIX_EMULATE), so its tiling, staging,
fragment offsets, orientations, edges, batches, K-split partials and epilogue store run on adapters without matrix
units, against float64 numpy. Tolerance: f32 operands, f32 accumulation over K <= 2048 terms, relative to the
largest output: 1e-5; f16 operands (exact products, f32 sums, output rounded to f16): 2e-3. The real kernels on a
GPU's matrix units are checked against torch by .dev scripts on the lent GPU (benchmarks/RESULTS.md)."""
import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter import determinism
from scellis_jupyter.backends.wgpu.kernels import matmul_sgm
from scellis_jupyter.errors import SettingError

from fixtures.devices import WG, needs_wgpu

pytestmark = needs_wgpu
R = np.random.default_rng(11)


@pytest.fixture
def emu(monkeypatch):
    """Emulated 4x4x4 subgroup matrices of f32 on 8-invocation subgroups, tier prod; recorded programs forgotten
    before and after, so every product goes through its launcher again. (Small fragments: an emulated fragment is a
    private array every invocation holds, and 16 fragments of 8x8 a subgroup overflow what llvmpipe and
    SwiftShader give an invocation; the real 16x16 fragments are registers of the matrix units.)"""
    monkeypatch.setenv("SCELLIS_WGPU_SUBGROUP_MATRIX_EMULATE", "f32:4x4x4:8")
    WG.impl.forget_programs()
    with determinism.tier("prod"):
        yield WG
    WG.impl.forget_programs()


def sgm_keys() -> set:
    return {k for k in WG.impl._pipelines if k.startswith("matmul_sgm:")}


def rel(got, want) -> float:
    want = np.asarray(want, np.float64)
    return float(np.abs(np.asarray(got, np.float64) - want).max() / (np.abs(want).max() + 1e-30))


def mm(a, b, dtype="f32"):
    return (sc.tensor(a, dtype=dtype, device=WG) @ sc.tensor(b, dtype=dtype, device=WG)).numpy()


def test_8x8_fragments_on_32_invocation_subgroups(monkeypatch):
    """The shape of a real configuration (Apple's 8x8x8, NVIDIA's 32-invocation subgroups) on the smallest tile."""
    monkeypatch.setenv("SCELLIS_WGPU_SUBGROUP_MATRIX_EMULATE", "f32:8x8x8:32")
    monkeypatch.setenv("SCELLIS_MATMUL_SGM_TILE", "sgm_small")
    WG.impl.forget_programs()
    a, b = R.standard_normal((37, 70)).astype(np.float32), R.standard_normal((70, 45)).astype(np.float32)
    with determinism.tier("prod"):
        assert rel(mm(a, b), a.astype(np.float64) @ b) < 1e-5
    assert any("sgm_small@f328x8x8s32emu" in k for k in sgm_keys()), sgm_keys()
    WG.impl.forget_programs()


@pytest.mark.parametrize("m,n,k", [(37, 45, 70), (1, 1, 1), (5, 3, 9), (32, 32, 16), (65, 33, 31)])
def test_odd_shapes_match_float64(emu, m, n, k):
    a, b = R.standard_normal((m, k)).astype(np.float32), R.standard_normal((k, n)).astype(np.float32)
    WG.impl._pipelines = {k: v for k, v in WG.impl._pipelines.items() if not k.startswith("matmul_sgm:")}
    assert rel(mm(a, b), a.astype(np.float64) @ b) < 1e-5
    assert sgm_keys(), "the product did not run on the subgroup-matrix kernel"


@pytest.mark.parametrize("tile", [t for t in matmul_sgm.TILES if t not in matmul_sgm.WHOLE])
def test_every_tile_on_edges_and_transposes(emu, monkeypatch, tile):
    """Each tile, its rows and columns not multiples of the tile, A and B read transposed (folded permutes)."""
    cfg = matmul_sgm.configs(WG.impl)[0]
    if not matmul_sgm.fits(cfg, tile, WG.impl):
        pytest.skip(f"{tile} does not fit this adapter's limits")
    monkeypatch.setenv("SCELLIS_MATMUL_SGM_TILE", tile)
    a = R.standard_normal((70, 41)).astype(np.float32)
    b = R.standard_normal((41, 53)).astype(np.float32)
    assert rel(mm(a, b), a.astype(np.float64) @ b) < 1e-5
    at, bt = np.ascontiguousarray(a.T), np.ascontiguousarray(b.T)
    got = (sc.tensor(at, device=WG).T @ sc.tensor(bt, device=WG).T).numpy()
    assert rel(got, a.astype(np.float64) @ b) < 1e-5
    keys = [k for k in sgm_keys() if f":{tile}@" in k]
    assert any("+ta" in k and "+tb" in k for k in keys), keys


@pytest.mark.parametrize("tile", sorted(matmul_sgm.WHOLE))
def test_whole_tiles(emu, monkeypatch, tile):
    """A whole tile (unbounded vec4 loads, two staging buffers) on shapes that fill whole tiles, with one, an
    even and an odd number of k steps; on the smallest tile also A and B read transposed and a batch with
    broadcast B (each a pipeline of its own: compiling the emulated fragments is what costs here). Every product
    ran on that tile."""
    monkeypatch.setenv("SCELLIS_WGPU_SUBGROUP_MATRIX_EMULATE", "f32:4x4x4:4")   # whole tiles of one k fragment a
    WG.impl.forget_programs()                                                    # step need small subgroups here
    cfg = matmul_sgm.configs(WG.impl)[0]
    assert matmul_sgm.fits(cfg, tile, WG.impl)
    tm, tn, bk = matmul_sgm.tile(cfg, tile)[:3]
    monkeypatch.setenv("SCELLIS_MATMUL_SGM_TILE", tile)
    m, n = 2 * tm, 3 * tn
    for k in (bk, 4 * bk, 5 * bk):
        a, b = R.standard_normal((m, k)).astype(np.float32), R.standard_normal((k, n)).astype(np.float32)
        assert rel(mm(a, b), a.astype(np.float64) @ b) < 1e-5, k
    keys = [k for k in sgm_keys() if f":{tile}@" in k]
    if tile == "sgm_w_mid":
        at, bt = np.ascontiguousarray(a.T), np.ascontiguousarray(b.T)
        got = (sc.tensor(at, device=WG).T @ sc.tensor(bt, device=WG).T).numpy()
        assert rel(got, a.astype(np.float64) @ b) < 1e-5
        ab = R.standard_normal((3, m, k)).astype(np.float32)
        assert rel(mm(ab, b), ab.astype(np.float64) @ b) < 1e-5
        keys = [k for k in sgm_keys() if f":{tile}@" in k]
        assert any("+ta" in k and "+tb" in k for k in keys), keys
    assert any("+ta" not in k for k in keys), keys


def test_whole_tile_falls_back_where_a_chunk_does_not_fill_it(emu, monkeypatch):
    """Rows, columns or k that are not whole tiles (an unbounded load there would read past the operands) run on
    the whole tile's bounded twin, correctly (on subgroups where the whole tile runs, as test_whole_tiles)."""
    monkeypatch.setenv("SCELLIS_WGPU_SUBGROUP_MATRIX_EMULATE", "f32:4x4x4:4")
    monkeypatch.setenv("SCELLIS_MATMUL_SGM_TILE", "sgm_w_mid")
    WG.impl.forget_programs()
    cfg = matmul_sgm.configs(WG.impl)[0]
    tm, tn, bk = matmul_sgm.tile(cfg, "sgm_w_mid")[:3]
    assert "sgm_w_mid" in matmul_sgm.candidates(cfg, WG.impl, lambda name: True)
    WG.impl._pipelines = {k: v for k, v in WG.impl._pipelines.items() if not k.startswith("matmul_sgm:")}
    for m, n, k in ((2 * tm + 1, tn, bk), (2 * tm, tn + 1, bk), (2 * tm, tn, bk + 1)):
        a = R.standard_normal((m, k)).astype(np.float32)
        b = R.standard_normal((k, n)).astype(np.float32)
        assert rel(mm(a, b), a.astype(np.float64) @ b) < 1e-5, (m, n, k)
    assert sgm_keys() and all(":sgm_mid@" in k for k in sgm_keys()), sgm_keys()


def test_whole_fits_rule():
    """The launcher's test for a whole tile: whole tiles, k (and a split's k) and a causal band's offset in whole
    steps, 16-byte aligned offsets, batch strides and leading dimensions."""
    cfg = matmul_sgm.Config("f16", 16, 16, 16, 32)
    ok = dict(m=128, n=128, k=64, kc=0, band=0, offs=(0, 0), strides3=((0, 0, 0), (0, 0, 0)), lds=(64, 128))
    assert matmul_sgm.whole_fits(cfg, "sgm_w_big", **ok)
    assert not matmul_sgm.whole_fits(cfg, "sgm_big", **ok)
    assert matmul_sgm.whole_fits(cfg, "sgm_w_big", **{**ok, "band": 2, "band_off": -32})
    for bad in (dict(m=120), dict(n=136), dict(k=72), dict(kc=40), dict(band=1, band_off=8), dict(offs=(4, 0)),
                dict(strides3=((0, 0, 12), (0, 0, 0))), dict(lds=(68, 128))):
        assert not matmul_sgm.whole_fits(cfg, "sgm_w_big", **{**ok, **bad}), bad


def test_store_strip_shrinks_to_the_workgroup_memory_limit(emu, monkeypatch):
    """Where the device's workgroup memory holds the staging and only one result fragment a subgroup, the store
    goes through Cs a fragment at a time (csf 1), where it holds a whole fragment row, a row at a time; both
    give the same product."""
    cfg = matmul_sgm.configs(WG.impl)[0]
    monkeypatch.setenv("SCELLIS_MATMUL_SGM_TILE", "sgm_wide")
    fn, wm, wn = matmul_sgm.tile(cfg, "sgm_wide")[6], *matmul_sgm.tile(cfg, "sgm_wide")[3:5]
    one = max(matmul_sgm.smem_bytes(cfg, "sgm_wide", ta, tb, 1) for ta in (False, True) for tb in (False, True))
    assert matmul_sgm.cs_frags(cfg, "sgm_wide", one) == 1 and matmul_sgm.cs_frags(cfg, "sgm_wide", one - 4) == 0
    assert matmul_sgm.cs_frags(cfg, "sgm_wide", 1 << 20) == fn
    a, b = R.standard_normal((70, 41)).astype(np.float32), R.standard_normal((41, 53)).astype(np.float32)
    want = a.astype(np.float64) @ b
    assert rel(mm(a, b), want) < 1e-5
    monkeypatch.setitem(WG.impl.limits, "max-compute-workgroup-storage-size", one)
    WG.impl.forget_programs()
    assert rel(mm(a, b), want) < 1e-5
    assert any("sgm_wide@" in k and "c1:" in k for k in sgm_keys()), sgm_keys()


def test_batched_broadcast(emu):
    a = R.standard_normal((3, 2, 19, 24)).astype(np.float32)
    b = R.standard_normal((2, 24, 21)).astype(np.float32)
    assert rel(mm(a, b), a.astype(np.float64) @ b) < 1e-5


def test_ksplit_partials(emu):
    """Few output tiles and a long K: the shape rule splits K into f32 partials (the kernel's kc, split and
    partial stride), summed by matmul_ksplit."""
    a = R.standard_normal((8, 2048)).astype(np.float32)
    b = R.standard_normal((2048, 12)).astype(np.float32)
    WG.impl._pipelines = {k: v for k, v in WG.impl._pipelines.items()
                          if not k.startswith(("matmul_sgm:", "matmul_ksplit:"))}
    assert rel(mm(a, b), a.astype(np.float64) @ b) < 1e-5
    assert sgm_keys() and any(k.startswith("matmul_ksplit:") for k in WG.impl._pipelines), sgm_keys()


def test_epilogue_in_the_store(emu):
    """relu(x @ w + b) fuses its chain into the product's store (kernels/epilogue.py): the kernel's epilogue
    store path."""
    x = R.standard_normal((50, 24)).astype(np.float32)
    w = R.standard_normal((24, 36)).astype(np.float32)
    bias = R.standard_normal((36,)).astype(np.float32)
    tx, tw, tb = (sc.tensor(v, device=WG) for v in (x, w, bias))
    got = sc.ops.relu(tx @ tw + tb).numpy()
    assert rel(got, np.maximum(x.astype(np.float64) @ w + bias, 0)) < 1e-5
    assert any(":epi" in k for k in sgm_keys()), sgm_keys()


def test_f16_operands(monkeypatch):
    if not WG.impl.has_f16:
        pytest.skip("this adapter has no shader-f16")
    monkeypatch.setenv("SCELLIS_WGPU_SUBGROUP_MATRIX_EMULATE", "f16:4x4x4:8")
    WG.impl.forget_programs()
    try:
        with determinism.tier("prod"):
            a = R.standard_normal((33, 40)).astype(np.float16)
            b = R.standard_normal((40, 27)).astype(np.float16)
            assert rel(mm(a, b, "f16"), a.astype(np.float64) @ b) < 2e-3
        assert any(":f16" in k for k in sgm_keys())
    finally:
        WG.impl.forget_programs()


def test_not_under_debug(monkeypatch):
    """debug promises the reference path's bits, which a matrix unit's own k order does not give: the SIMT kernel
    runs there."""
    monkeypatch.setenv("SCELLIS_WGPU_SUBGROUP_MATRIX_EMULATE", "f32:8x8x8")
    WG.impl.forget_programs()
    before = set(sgm_keys())
    a = R.standard_normal((20, 20)).astype(np.float32)
    with determinism.tier("debug"):
        got = mm(a, a)
        assert np.array_equal(got, mm(a, a))
    assert sgm_keys() == before
    WG.impl.forget_programs()


def test_without_the_feature_nothing_changes(monkeypatch):
    monkeypatch.delenv("SCELLIS_WGPU_SUBGROUP_MATRIX_EMULATE", raising=False)
    assert matmul_sgm.configs(WG.impl) == [] or "subgroup-matrix" in WG.impl.features
    assert matmul_sgm.config_for(WG.impl, "f32", "fast") is None or "subgroup-matrix" in WG.impl.features


@pytest.mark.parametrize("bad", ["f64:8x8x8", "f32:8x8", "f32:6x8x8", "f16:8x8x8:0", "nonsense"])
def test_bad_emulation_setting(monkeypatch, bad):
    monkeypatch.setenv("SCELLIS_WGPU_SUBGROUP_MATRIX_EMULATE", bad)
    with pytest.raises(SettingError, match="SCELLIS_WGPU_SUBGROUP_MATRIX_EMULATE"):
        matmul_sgm.emulated()


def test_adapter_configs_are_read(monkeypatch):
    """An adapter's configurations (as Dawn lists them) become the engine's: f32 results, fixed subgroup size only,
    largest first; an f16-result or int8 one, or a varying subgroup size, is not used."""
    class Fake:
        features = {"subgroup-matrix", "subgroup"}
        sgm_configs = [
            {"component_type": "f16", "result_component_type": "f32", "m": 16, "n": 8, "k": 16,
             "min_subgroup_size": 32, "max_subgroup_size": 32},
            {"component_type": "f16", "result_component_type": "f32", "m": 16, "n": 16, "k": 16,
             "min_subgroup_size": 32, "max_subgroup_size": 32},
            {"component_type": "f16", "result_component_type": "f16", "m": 16, "n": 16, "k": 16,
             "min_subgroup_size": 32, "max_subgroup_size": 32},
            {"component_type": "i8", "result_component_type": "i32", "m": 16, "n": 16, "k": 32,
             "min_subgroup_size": 32, "max_subgroup_size": 32},
            {"component_type": "f32", "result_component_type": "f32", "m": 8, "n": 8, "k": 8,
             "min_subgroup_size": 8, "max_subgroup_size": 32},
        ]
        has_f16 = True
    monkeypatch.delenv("SCELLIS_WGPU_SUBGROUP_MATRIX_EMULATE", raising=False)
    got = matmul_sgm.configs(Fake())
    assert [(c.component, c.m, c.n, c.k, c.sgs) for c in got] == [("f16", 16, 16, 16, 32), ("f16", 16, 8, 16, 32)]
    assert matmul_sgm.config_for(Fake(), "f16", "prod") == got[0]
    assert matmul_sgm.config_for(Fake(), "f16", "debug") is None
    assert matmul_sgm.config_for(Fake(), "f32", "fast") is None


def test_the_tuner_times_the_fitting_tiles_and_the_cache_decides(emu, monkeypatch, tmp_path):
    """SCELLIS_MATMUL_TUNE=on: the subgroup-matrix tiles that fit are timed once per shape class (each built as
    its own pipeline), the fastest kept in the adapter's cache under an `sgm:` key; a tile written into the cache
    is the one the next product of that class runs (no timing then)."""
    from scellis_jupyter.backends.wgpu.kernels import matmul_tune as T
    monkeypatch.setenv("SCELLIS_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("SCELLIS_MATMUL_TUNE", "on")
    monkeypatch.setattr(WG.impl, "_matmul_tuner", None, raising=False)
    # two candidates keep the test short (each emulated tile builds slowly on a CPU adapter)
    monkeypatch.setattr(matmul_sgm, "TILES", {t: matmul_sgm.TILES[t] for t in ("sgm_mid", "sgm_small")})
    WG.impl._pipelines = {k: v for k, v in WG.impl._pipelines.items() if not k.startswith("matmul_sgm:")}
    a, b = R.standard_normal((70, 48)).astype(np.float32), R.standard_normal((48, 40)).astype(np.float32)
    assert rel(mm(a, b), a.astype(np.float64) @ b) < 1e-5
    cfg = matmul_sgm.configs(WG.impl)[0]
    fitting = {t for t in matmul_sgm.TILES if matmul_sgm.fits(cfg, t, WG.impl)}
    assert len(fitting) > 1
    assert {k.split(":")[1].split("@")[0] for k in sgm_keys()} == fitting      # every fitting tile was built
    table = T.Tuner(WG.impl).table
    (key, (best, _)), = [(k, v) for k, v in table.items() if k.startswith("sgm:")]
    assert best in fitting and T.shape_class("f32", 70, 40, 48, 1) in key
    other = next(t for t in sorted(fitting) if t != best)
    table[key] = (other, 1)
    tuner = T.Tuner(WG.impl)
    tuner.table = table
    WG.impl._matmul_tuner = tuner
    WG.impl.forget_programs()
    WG.impl._pipelines = {k: v for k, v in WG.impl._pipelines.items() if not k.startswith("matmul_sgm:")}
    assert rel(mm(a, b), a.astype(np.float64) @ b) < 1e-5
    assert {k.split(":")[1].split("@")[0] for k in sgm_keys()} == {other}
