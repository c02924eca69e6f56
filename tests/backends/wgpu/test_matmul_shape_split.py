"""The K-split chosen by shape alone (matmul_tune.default_config): few output tiles and long K (a weight
gradient over many rows). It runs under every tier, debug included, because it is a fixed function of
the shape with boundaries that do not depend on the tile variant: reruns are bit-identical, and neither a
forced config nor the tuner changes the split under debug. Numerics vs float64 numpy within the f32
bound of tests/backends/wgpu/test_matmul.py (1e-4 of sqrt(sum_k a^2 b^2) per output).
"""
import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.backends.wgpu.kernels import matmul_tune as T

from fixtures.devices import WG, needs_wgpu

R = np.random.default_rng(13)


def test_the_rule_splits_few_tiles_with_long_k_only():
    v, s = T.default_config(384, 384, 1, 16384)          # the docstring's example: 36 64x64 tiles
    tm, tn = T.VARIANTS[v][:2]
    tiles = -(-384 // tm) * -(-384 // tn)
    assert s > 1 and tiles * s >= T.FILL_WORKGROUPS and 16384 // s >= T.MIN_SPLIT_K
    assert T.default_config(384, 384, 1, 1000)[1] == 1            # K too short
    assert T.default_config(384, 384, 2, 16384)[1] == 1           # batched
    assert T.default_config(384, 384, 1, 16384, "f16") == T.default_config(384, 384, 1, 16384)   # f16 alike
    assert T.default_config(384, 384, 1, 16384, whole=False)[1] == 1
    assert T.default_config(4096, 4096, 1, 16384)[1] == 1         # enough tiles already
    assert T.default_config(384, 384, 1, 16384)[0] == T.default_config(384, 384, 1)[0]   # the tile is unchanged


def test_a_split_matrix_of_enough_big_tiles_takes_the_big_tile():
    """384 x 1152 (27 128x128 tiles, 108 64x64 ones): unsplit it takes 64x64 tiles; with K = 16384 it
    splits on the big tile until FILL_WORKGROUPS run or a split would keep under MIN_SPLIT_K of K."""
    assert T.default_config(384, 1152, 1) == ("mid_pf", 1)
    v, s = T.default_config(384, 1152, 1, 16384)
    assert v == "big_p" and s > 1
    assert 27 * s >= T.FILL_WORKGROUPS or 16384 // (2 * s) < T.MIN_SPLIT_K
    assert T.default_config(384, 1152, 1, 16384, whole=False) == ("mid_pf", 1)   # a chunk never splits
    assert T.default_config(384, 1152, 1, 16384, "f16") == (v, s)     # f16 operands split alike (f32 partials)
    assert T.default_config(256, 256, 1, 16384)[0] == "mid_pf"     # 4 big tiles: too few for the big tile


def test_debug_tuner_candidates_keep_the_rule_split():
    s = T.default_config(70, 90, 1, 4100)[1]
    cands = T.candidates("f32", 70, 90, 4100, 1, True, "debug", 1 << 27)
    assert s > 1 and cands and {c[1] for c in cands} == {s}
    assert {c[1] for c in T.candidates("f32", 70, 90, 4100, 1, True, "prod", 1 << 27)} > {1}


def _fresh(monkeypatch, tune):
    monkeypatch.setenv("SCELLIS_MATMUL_TUNE", tune)
    WG.impl.flush()
    WG.impl._records.clear()
    WG.impl._prog_params.clear()


def _check(got, a, b):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    tol = 1e-4 * np.sqrt((a64 * a64) @ (b64 * b64)) + 1e-30
    assert np.all(np.abs(got - a64 @ b64) <= tol)


@needs_wgpu
@pytest.mark.parametrize("tune", ["off", "tall:8", "big"])
def test_debug_runs_the_shape_split_bit_identically(tune, monkeypatch):
    """70 x 4100 x 90 (4 tiles of 64x64): split under debug by the rule, whatever config is forced."""
    _fresh(monkeypatch, tune)
    a, b = R.standard_normal((70, 4100)).astype(np.float32), R.standard_normal((4100, 90)).astype(np.float32)
    with sc.tier("debug"):
        for xa, la in ((sc.tensor(a, device=WG), a), (sc.tensor(np.ascontiguousarray(a.T), device=WG).transpose(), a)):
            before = WG.impl.dispatches
            r1 = (xa @ sc.tensor(b, device=WG)).numpy()
            assert WG.impl.dispatches - before == 2          # the partial products, then their fixed-order sum
            _check(r1, la, b)
            assert np.array_equal(r1, (xa @ sc.tensor(b, device=WG)).numpy())


U16 = 2.0 ** -11


@needs_wgpu
@pytest.mark.parametrize("tier", ["debug", "prod", "fast"])
def test_f16_operands_split_into_f32_partials(tier, monkeypatch):
    """f16 operands (a mixed-precision weight gradient) split like f32: the partial products into f32 (f32
    math, or packed f16 folded into f32 every BK k-steps under fast), summed in f32 and rounded to f16 once.
    Bound against float64 products of the f16 inputs: the output's rounding u|exact| (u = 2^-11) plus the
    f32 accumulation (test_matmul.py's 1e-4 of sqrt(sum_k a^2 b^2)); under fast also the packed partials'
    worst case gamma_{BK+1} * sum_k |a_k b_k| (test_matmul_packed_f16.py)."""
    if not WG.impl.has_f16:
        pytest.skip("adapter lacks shader-f16")
    _fresh(monkeypatch, "off")
    a = R.standard_normal((70, 4100)).astype(np.float16)
    b = R.standard_normal((4100, 90)).astype(np.float16)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    exact, absum = a64 @ b64, np.abs(a64) @ np.abs(b64)
    tol = U16 * np.abs(exact) + 1e-4 * np.sqrt((a64 * a64) @ (b64 * b64)) + 1e-7
    if tier == "fast":
        g = (17 * U16) / (1 - 17 * U16)             # BK <= 16
        tol = tol + g * absum + 1e-6 * absum
    with sc.tier(tier):
        tb = sc.tensor(b, device=WG).to("f16")
        for xa in (sc.tensor(a, device=WG).to("f16"),
                   sc.tensor(np.ascontiguousarray(a.T), device=WG).to("f16").transpose()):
            xa.numpy(), tb.numpy()                       # the casts to f16 realized first
            before = WG.impl.dispatches
            r1 = (xa @ tb).numpy()
            assert WG.impl.dispatches - before == 2          # the partial products, then their fixed-order sum
            assert r1.dtype == np.float16
            err = np.abs(r1.astype(np.float64) - exact)
            assert np.all(err <= tol), float((err / tol).max())
            assert np.array_equal(r1, (xa @ tb).numpy())    # the same split, the same order: the same bits


def test_the_fill_target_can_be_set_for_measuring(monkeypatch):
    """SCELLIS_KSPLIT_FILL moves the workgroups the rule aims for; a bad value is refused by name."""
    monkeypatch.setenv("SCELLIS_KSPLIT_FILL", "128")
    assert T.default_config(384, 384, 1, 16384) == ("mid_pf", 4)      # 36 tiles x 4 >= 128
    monkeypatch.setenv("SCELLIS_KSPLIT_FILL", "0")
    with pytest.raises(sc.ScellisError, match="SCELLIS_KSPLIT_FILL"):
        T.default_config(384, 384, 1, 16384)
    monkeypatch.delenv("SCELLIS_KSPLIT_FILL")
    assert T.default_config(384, 384, 1, 16384) == ("mid_pf", 16)     # 36 x 16 >= 512


@needs_wgpu
@pytest.mark.parametrize("k", [4100, 300])        # split by the rule (partials, then their sum adds), unsplit
def test_an_accumulating_product_adds_onto_c(k):
    """The internal `acc` attr (attention_scores adds dk, dv over query blocks): C += A @ B, through the
    K-split's sum as through the tile's store; with K = 0 C stays."""
    from types import SimpleNamespace
    from scellis_jupyter.backends.wgpu.kernels.matmul import _matmul
    be = WG.impl
    a, b = R.standard_normal((70, k)).astype(np.float32), R.standard_normal((k, 90)).astype(np.float32)
    c0 = R.standard_normal((70, 90)).astype(np.float32)
    sa, sb, sc_ = be.from_numpy(a, "f32"), be.from_numpy(b, "f32"), be.from_numpy(c0, "f32")

    def add(ins):          # launches run inside a program (as in test_matmul_band.py)
        prog = SimpleNamespace(hash=f"acc-test-{k}-{ins[0].shape[1]}", tier="debug")
        be.begin(prog)
        _matmul(be, SimpleNamespace(dtype="f32", shape=(70, 90), attrs={"acc": True}), ins, sc_)
        be.end(prog)
        be.flush()
    before = be.dispatches
    add([sa, sb])
    assert be.dispatches - before == (2 if k > 4096 else 1)
    got = be.to_numpy(sc_).astype(np.float64)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    tol = 1e-4 * np.sqrt((a64 * a64) @ (b64 * b64)) + 1e-5 * np.abs(c0)
    assert np.all(np.abs(got - (c0 + a64 @ b64)) <= tol)
    empty = [be.from_numpy(np.zeros((70, 0), np.float32), "f32"), be.from_numpy(np.zeros((0, 90), np.float32), "f32")]
    add(empty)
    assert np.array_equal(be.to_numpy(sc_).astype(np.float64), got)
