"""Tiled WGSL matmul on wgpu (llvmpipe in CI) vs the numpy reference device and float64 numpy.

Tolerances: f32 errors are bounded by rtol * sqrt(sum_k a_ik^2 b_kj^2) (the sqrt(K)-scaled magnitude of
each dot product) with rtol = 1e-4; f16 compares against float64 products of the f16-rounded inputs
with 1e-3 * |exact| (the f16 output rounding, 2^-11) plus 1e-3 of that magnitude (f32 accumulation).
"""
import os
import subprocess
import sys

import numpy as np
import pytest

import scellis_jupyter as sc

from fixtures.devices import WG, needs_wgpu, not_again_on_dawn, ran

pytestmark = needs_wgpu
REF = sc.device("reference")
R = np.random.default_rng(7)

F32_RTOL = 1e-4
F16_RTOL = 1e-3


def _exact(a, b):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return np.matmul(a64, b64), np.sqrt(np.matmul(a64 * a64, b64 * b64))


def check(got, a, b, dtype="f32", against=None):
    exact, mag = _exact(a, b)
    assert got.shape == exact.shape
    if dtype == "f32":
        assert got.dtype == np.float32
        tol = F32_RTOL * mag + 1e-30
    else:
        assert got.dtype == np.float16
        tol = F16_RTOL * np.abs(exact) + F16_RTOL * mag + 1e-7
    ref = exact if against is None else against.astype(np.float64)
    err = np.abs(got.astype(np.float64) - ref)
    assert np.all(err <= (tol if against is None else 2 * tol)), float((err / np.maximum(tol, 1e-30)).max())


def mm(a, b, dev, dtype="f32"):
    ta, tb = sc.tensor(a, device=dev), sc.tensor(b, device=dev)
    if dtype == "f16":
        ta, tb = ta.to("f16"), tb.to("f16")
    return (ta @ tb).numpy()


SHAPES = [((1, 1), (1, 1)), ((7, 13), (13, 5)), ((0, 3), (3, 4)), ((3, 0), (0, 4)), ((3, 4), (4, 0)),
          ((129, 257), (257, 65)), ((2, 1, 5, 7), (3, 7, 4)), ((4, 31, 17), (17, 33)), ((5, 3), (2, 3, 6)),
          ((2, 3, 1, 2, 5), (1, 3, 4, 5, 3)), ((2, 1, 3, 1, 2, 5), (1, 4, 1, 2, 5, 3)), ((13,), (13, 6)), ((6, 13), (13,)), ((64, 64), (64, 64))]


@pytest.mark.parametrize("sa,sb", SHAPES, ids=[f"{a}@{b}" for a, b in SHAPES])
def test_f32_matches_float64_and_reference(sa, sb):
    a, b = R.standard_normal(sa).astype(np.float32), R.standard_normal(sb).astype(np.float32)
    got = mm(a, b, WG)
    check(got, a, b)
    check(got, a, b, against=mm(a, b, REF))


def test_k0_gives_zeros_and_empty_outputs():
    got = mm(np.ones((3, 0), np.float32), np.ones((0, 4), np.float32), WG)
    assert got.shape == (3, 4) and not got.any()
    assert mm(np.ones((2, 0, 3), np.float32), np.ones((3, 5), np.float32), WG).shape == (2, 0, 5)
    assert mm(np.ones((0, 2, 3), np.float32), np.ones((3, 5), np.float32), WG).shape == (0, 2, 5)


F16_SHAPES = [((7, 13), (13, 5)), ((129, 257), (257, 65)), ((2, 1, 5, 7), (3, 7, 4)), ((3, 0), (0, 4)),
              ((1, 1), (1, 1))]


@pytest.mark.parametrize("sa,sb", F16_SHAPES, ids=[f"{a}@{b}" for a, b in F16_SHAPES])
def test_f16_accumulates_in_f32(sa, sb):
    if not WG.impl.has_f16:
        pytest.skip("adapter lacks shader-f16")
    a, b = R.standard_normal(sa).astype(np.float16), R.standard_normal(sb).astype(np.float16)
    got = mm(a, b, WG, "f16")
    check(got, a, b, "f16")
    check(got, a, b, "f16", against=mm(a, b, REF, "f16"))


from scellis_jupyter.backends.wgpu.kernels.matmul_tune import VARIANTS  # noqa: E402
from scellis_jupyter.determinism import trajectory_tolerance  # noqa: E402

T_FAST_RTOL = trajectory_tolerance("fast", 4)     # tier fast's declared drift over the 4 steps below


def _fresh(monkeypatch, tune):
    """Force a matmul config (SCELLIS_MATMUL_TUNE) and forget recorded programs so launchers choose again."""
    monkeypatch.setenv("SCELLIS_MATMUL_TUNE", tune)
    WG.impl.flush()
    WG.impl._records.clear()
    WG.impl._prog_params.clear()


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_tile_variant_on_odd_shapes(variant, monkeypatch):
    _fresh(monkeypatch, variant)
    for sa, sb in [((129, 257), (257, 65)), ((1, 1), (1, 1)), ((3, 130, 9), (9, 131)), ((2, 1, 5, 7), (3, 7, 4))]:
        a, b = R.standard_normal(sa).astype(np.float32), R.standard_normal(sb).astype(np.float32)
        check(mm(a, b, WG), a, b)
        if WG.impl.has_f16:
            a16, b16 = a.astype(np.float16), b.astype(np.float16)
            check(mm(a16, b16, WG, "f16"), a16, b16, "f16")
    assert ran(f"matmul:{variant}:f32")      # the forced tile really ran


KSPLIT_SHAPES = [((70, 1030), (1030, 90)), ((1, 1100), (1100, 3)), ((130, 2048), (2048, 129))]   # K >= 128 * 8


@pytest.mark.parametrize("config", ["mid:4", "big:2", "tall:8", "small:2"])
def test_ksplit_matches_float64_and_reruns_bit_identically(config, monkeypatch):
    """Under prod a K-split runs (partials + a fixed-order sum): within the f32 bound, and the same bits twice."""
    _fresh(monkeypatch, config)
    with sc.tier("prod"):
        for sa, sb in KSPLIT_SHAPES:
            a, b = R.standard_normal(sa).astype(np.float32), R.standard_normal(sb).astype(np.float32)
            before = WG.impl.dispatches
            r1 = mm(a, b, WG)
            assert WG.impl.dispatches - before == 2          # the partial products, then their sum
            check(r1, a, b)
            assert np.array_equal(r1, mm(a, b, WG))


def test_ksplit_is_never_used_under_debug(monkeypatch):
    """Under debug only the shape rule splits (tests/backends/wgpu/test_matmul_shape_split.py); it does not
    split this shape (K < LONG_K), so a forced K-split falls back to the plain tile, bit for bit."""
    a, b = R.standard_normal((70, 1030)).astype(np.float32), R.standard_normal((1030, 90)).astype(np.float32)
    with sc.tier("debug"):
        _fresh(monkeypatch, "mid")
        plain = mm(a, b, WG)
        _fresh(monkeypatch, "mid:4")
        before = WG.impl.dispatches
        got = mm(a, b, WG)
        assert WG.impl.dispatches - before == 1
    assert np.array_equal(got, plain)


def test_autotune_caches_per_adapter(monkeypatch, tmp_path):
    from scellis_jupyter.backends.wgpu.kernels import matmul_tune as T
    monkeypatch.setenv("SCELLIS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(WG.impl, "_matmul_tuner", None, raising=False)
    _fresh(monkeypatch, "on")
    a, b = R.standard_normal((96, 700)).astype(np.float32), R.standard_normal((700, 80)).astype(np.float32)
    built = []
    real = WG.impl.pipeline
    monkeypatch.setattr(WG.impl, "pipeline", lambda key, src: (built.append(key), real(key, src))[1])
    with sc.tier("prod"):
        check(mm(a, b, WG), a, b)
    # the candidates were timed as the launch runs them: this eager product's operands bind read-only
    timed = {k for k in built if k.startswith("matmul:")}
    assert len(timed) > 3 and all(k.endswith("+roab") for k in timed), timed
    path = T.cache_path(WG.impl.adapter_id)
    assert path.parent.parent == tmp_path and path.exists()
    table = T.Tuner(WG.impl).table
    key = T.shape_class("f32", 96, 80, 700, 1) + ":ro"      # read-only operands: a class of their own
    assert key in table and T.shape_class("f32", 96, 80, 700, 1) not in table
    assert table[key] in T.candidates("f32", 96, 80, 700, 1, True, "prod", WG.impl.binding_limit,
                                      int(WG.impl.limits["max-compute-workgroup-storage-size"]))
    # a second lookup reads the cache: no timing runs (the timer would raise)
    WG.impl._matmul_tuner = T.Tuner(WG.impl)
    assert T.choose(WG.impl, "f32", 96, 80, 700, 1, True, lambda *c: 1 / 0, ro=True) == table[key]


@pytest.mark.parametrize("adapter_type,tier,tunes", [("DiscreteGPU", "fast", True), ("IntegratedGPU", "fast", True),
                                                      ("DiscreteGPU", "prod", False), ("DiscreteGPU", "debug", False),
                                                      ("CPU", "fast", False)])
def test_auto_tunes_only_tier_fast_on_a_gpu(adapter_type, tier, tunes, monkeypatch, tmp_path):
    """SCELLIS_MATMUL_TUNE unset (`auto`): a program of tier fast on a GPU adapter is autotuned (a measured
    choice is within that tier's contract); prod and debug, and any tier on a CPU adapter (llvmpipe), run the
    tile table without timing anything."""
    from scellis_jupyter.backends.wgpu.kernels import matmul_tune as T
    monkeypatch.setenv("SCELLIS_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("SCELLIS_MATMUL_TUNE", raising=False)
    monkeypatch.setattr(WG.impl, "_matmul_tuner", None, raising=False)
    monkeypatch.setattr(WG.impl, "adapter_type", adapter_type)
    monkeypatch.setattr(WG.impl, "tier", tier)
    timed, said = [], []
    monkeypatch.setattr(T, "notice", said.append)

    def timer(variant, splits):
        timed.append((variant, splits))
        return 1e-3 if (variant, splits) == ("tall", 1) else 2e-3     # the timer decides the pick
    got = T.choose(WG.impl, "f32", 300, 200, 64, 1, True, timer)
    base = T.default_config(300, 200, 1, 64, "f32", True, WG.impl.binding_limit,
                            int(WG.impl.limits["max-compute-workgroup-storage-size"]))
    if tunes:
        assert T.tune_mode(WG.impl) == "on" and got == ("tall", 1) != base
        assert ("tall", 1) in timed and len(timed) > 3
        assert T.cache_path(WG.impl.adapter_id).exists()
        assert len(said) == 1 and "tier fast" in said[0] and str(tmp_path) in said[0]   # the pause is said
        T.choose(WG.impl, "f32", 900, 200, 64, 1, True, timer)     # another shape: timed, not said again
        assert len(said) == 1 and len(T.Tuner(WG.impl).table) == 2
    else:
        assert T.tune_mode(WG.impl) == "off" and got == base and timed == [] and said == []


@not_again_on_dawn("test_autotune_caches_per_adapter tunes there, and the tiles it picks are checked by the rest")
def test_auto_fast_run_trains_on_tuned_tiles(monkeypatch, tmp_path):
    """End to end through sc.train: a tier-fast run on a (pretended) GPU adapter autotunes its matmuls, stores
    the picks in the adapter's cache, and trains to the tile table's losses within tier fast's tolerance. The
    tuner times three tiles of each shape's candidates here (each one's pipeline built on llvmpipe is what costs;
    every tile and split is timed by test_autotune_caches_per_adapter and the tuner tests)."""
    from fixtures import spec_text
    from scellis_jupyter.backends.wgpu.kernels import matmul_tune as T
    spec = spec_text("tiny_lm", determinism="fast")
    monkeypatch.setenv("SCELLIS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(T, "gpu_adapter", lambda be: True)     # the run opens its own backend on llvmpipe
    every = T.candidates
    monkeypatch.setattr(T, "candidates", lambda *a, **kw: [c for c in every(*a, **kw)
                                                           if c[0] in ("tall", "mid", "small")])
    losses = {}
    for mode in ("off", "auto"):
        monkeypatch.setattr(WG.impl, "_matmul_tuner", None, raising=False)
        _fresh(monkeypatch, mode)
        run = sc.train(spec, store=tmp_path / mode, device=WG, progress=False)
        losses[mode] = np.array(run.loss_history, np.float64)
    table = T.Tuner(WG.impl).table
    assert len(table) >= 3 and all(k.startswith(("f32:", "f16:")) for k in table)   # measured and stored
    assert len(losses["auto"]) == 4 and np.all(np.isfinite(losses["auto"]))
    np.testing.assert_allclose(losses["auto"], losses["off"], rtol=T_FAST_RTOL)


def test_unknown_forced_config_is_a_clear_error(monkeypatch):
    _fresh(monkeypatch, "huge:3")
    with pytest.raises(sc.ScellisError) as e:
        mm(np.ones((4, 4), np.float32), np.ones((4, 4), np.float32), WG)
    assert "SCELLIS_MATMUL_TUNE" in str(e.value.diagnostic.message)


def test_batch_beyond_workgroup_limit_is_folded(monkeypatch):
    # the z grid limit (65535) is lowered so that folding is exercised cheaply; the real one is slow
    from scellis_jupyter.backends.wgpu.kernels import matmul as M
    monkeypatch.setattr(M, "WG_MAX", 5)
    for sa, sb in [((23, 2, 3), (3, 2)), ((4, 6, 2, 3), (6, 3, 2)), ((2, 3, 2, 2, 3), (3, 1, 3, 2))]:
        a, b = R.standard_normal(sa).astype(np.float32), R.standard_normal(sb).astype(np.float32)
        check(mm(a, b, WG), a, b)


@pytest.mark.slow
def test_batch_over_65535():
    a, b = R.standard_normal((65537, 2, 3)).astype(np.float32), R.standard_normal((3, 2)).astype(np.float32)
    check(mm(a, b, WG), a, b)


def test_deterministic_reruns():
    a, b = R.standard_normal((3, 70, 90)).astype(np.float32), R.standard_normal((90, 50)).astype(np.float32)
    r1, r2 = mm(a, b, WG), mm(a, b, WG)
    assert np.array_equal(r1, r2)


# ---- splitting under a lowered binding limit, in a subprocess (the limit is read at backend creation) ----
# 256 KiB (SCELLIS_MAX_BINDING_BYTES): operands over it by the ratios WebGPU's default 4 MiB met with 16x the
# bytes, split the same ways (M and K blocks, N blocks, batch boxes, M blocks) at 1/16 of the llvmpipe time
SPLIT = r"""
import sys
import numpy as np, scellis_jupyter as sc
wg = sc.device("wgpu")
assert wg.impl.binding_limit == 256 * 2**10, wg.impl.binding_limit
out = {}
for name, a, b in CASES():
    out[name] = (sc.tensor(a, device=wg) @ sc.tensor(b, device=wg)).numpy()
out["dispatches"] = np.array(wg.impl.dispatches)
np.savez(sys.argv[1], **out)
"""

CASES_SRC = r"""
def CASES():
    r = np.random.default_rng(3)
    f = lambda *s: r.standard_normal(s).astype(np.float32)
    yield "square", f(384, 384), f(384, 384)          # 576 KiB operands: M and K blocks
    yield "wide", f(2, 1), f(1, 68_750)              # a 275 kB row of B and C: N blocks
    yield "batch", f(19, 64, 64), f(64, 64)           # 311 kB of A: batch boxes, B broadcast
    yield "tall", f(750, 100), f(100, 50)            # 300 kB of A: M blocks only
"""


def test_split_matches_unsplit_under_a_lowered_binding_limit(tmp_path):
    script = tmp_path / "split.py"
    script.write_text("import numpy as np\n" + CASES_SRC + SPLIT)
    env = dict(os.environ, SCELLIS_MAX_BINDING_BYTES=str(256 * 2**10), SCELLIS_DEVICE="wgpu")
    root = os.path.dirname(os.path.dirname(sc.__file__))   # the package under test, not another install
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    res = subprocess.run([sys.executable, str(script), str(tmp_path / "split.npz")], env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    split = np.load(tmp_path / "split.npz")
    assert int(split["dispatches"]) > 8            # really split
    ns: dict = {"np": np}
    exec(CASES_SRC, ns)
    assert WG.impl.binding_limit >= 16 * 2**20     # the in-process device runs these unsplit
    for name, a, b in ns["CASES"]():
        got = split[name]
        check(got, a, b)
        whole = mm(a, b, WG)
        check(got, a, b, against=whole)
