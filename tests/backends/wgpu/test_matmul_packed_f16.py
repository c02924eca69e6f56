"""Packed-f16 matmul (tier fast only: vec4<f16> products and sums, folded into f32 every BK k-steps) and the
register-prefetch tile variants, on wgpu (llvmpipe grants shader-f16) against float64 numpy and torch.

Numerics of the packed path: each output is sum over K/BK chunks (f32) of an f16 partial of at most
BK <= 16 products, each product and each partial add rounded to f16 (unit roundoff u = 2^-11). The
standard worst-case bound (Higham, gamma_n = n u / (1 - n u)) for one chunk is gamma_{BK} * sum |a b|,
so the whole element is within

    tol = u |exact| (output rounding)  +  gamma_{BK+1} * sum_k |a_k b_k|  +  1e-6 * sum_k |a_k b_k| (f32 adds)

against float64 products of the f16 inputs. That bound can fail (it is what the kernel guarantees);
we also check the typical error: the packed path's RMS error is within 8x of torch's CPU f16 matmul's
(which accumulates in f32) on the same inputs, and within 8x of our debug-tier f16 path's.
"""
import numpy as np
import pytest

import scellis_jupyter as sc

from fixtures.devices import WG, launch_keys, needs_wgpu, ran

pytestmark = needs_wgpu
R = np.random.default_rng(11)
U16 = 2.0 ** -11

from scellis_jupyter.backends.wgpu.kernels.matmul_tune import VARIANTS  # noqa: E402


def _need_f16():
    if not WG.impl.has_f16:
        pytest.skip("adapter lacks shader-f16")


def _fresh(monkeypatch, tune):
    monkeypatch.setenv("SCELLIS_MATMUL_TUNE", tune)
    WG.impl.flush()
    WG.impl._records.clear()
    WG.impl._prog_params.clear()


def mm16(a, b, tier):
    with sc.tier(tier):
        ta = sc.tensor(a, device=WG).to("f16")
        tb = sc.tensor(b, device=WG).to("f16")
        return (ta @ tb).numpy()


def bound(a16, b16, bk):
    a64, b64 = a16.astype(np.float64), b16.astype(np.float64)
    exact = np.matmul(a64, b64)
    absum = np.matmul(np.abs(a64), np.abs(b64))
    n = bk + 1
    gamma = n * U16 / (1 - n * U16)
    return exact, U16 * np.abs(exact) + gamma * absum + 1e-6 * absum + 1e-7


def check_packed(got, a16, b16, bk):
    exact, tol = bound(a16, b16, bk)
    assert got.dtype == np.float16 and got.shape == exact.shape
    err = np.abs(got.astype(np.float64) - exact)
    assert np.all(err <= tol), float((err / tol).max())
    return exact


ODD = [((129, 257), (257, 65)), ((1, 1), (1, 1)), ((3, 130, 9), (9, 131)), ((2, 1, 5, 7), (3, 7, 4)),
       ((67, 300), (300, 259))]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_packed_f16_every_variant_odd_shapes_and_batches(variant, monkeypatch):
    _need_f16()
    _fresh(monkeypatch, variant)
    from scellis_jupyter.backends.wgpu.kernels.matmul import fold_tiles
    bk = VARIANTS[variant][4] * fold_tiles(VARIANTS[variant][4])      # products an f16 partial sums
    for sa, sb in ODD:
        a = R.standard_normal(sa).astype(np.float16)
        b = R.standard_normal(sb).astype(np.float16)
        check_packed(mm16(a, b, "fast"), a, b, bk)
    assert ran(f"matmul:{variant}:f16+h16")      # the packed kernel of this tile ran


@pytest.mark.parametrize("variant", [v for v in sorted(VARIANTS) if VARIANTS[v][5]])   # every flagged variant
def test_flagged_variants_f32(variant, monkeypatch):
    """The prefetch / fma / padded tiles in f32 on shapes that end mid-tile and mid-k, batched."""
    _fresh(monkeypatch, variant)
    for sa, sb in ODD + [((2, 3, 40, 33), (3, 33, 70))]:
        a = R.standard_normal(sa).astype(np.float32)
        b = R.standard_normal(sb).astype(np.float32)
        got = (sc.tensor(a, device=WG) @ sc.tensor(b, device=WG)).numpy()
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        mag = np.sqrt(np.matmul(a64 * a64, b64 * b64))
        assert np.all(np.abs(got - np.matmul(a64, b64)) <= 1e-4 * mag + 1e-30)   # test_matmul.py's f32 bound
    assert ran(f"matmul:{variant}:f32")


def test_packed_error_is_near_torch_f16_and_debug_is_bit_stable(monkeypatch):
    torch = pytest.importorskip("torch")
    _need_f16()
    _fresh(monkeypatch, "big16")
    a = R.standard_normal((96, 1000)).astype(np.float16)
    b = R.standard_normal((1000, 80)).astype(np.float16)
    prod = mm16(a, b, "fast")
    exact = check_packed(prod, a, b, 16)
    dbg1, dbg2 = mm16(a, b, "debug"), mm16(a, b, "debug")
    assert np.array_equal(dbg1, dbg2)                        # f16 storage, f32 math: same bits each run
    assert np.array_equal(prod, mm16(a, b, "fast"))          # fixed order in the packed path too
    theirs = torch.matmul(torch.from_numpy(a), torch.from_numpy(b)).numpy()

    def rms(x):
        return float(np.sqrt(np.mean((x.astype(np.float64) - exact) ** 2)))
    e_prod, e_dbg, e_torch = rms(prod), rms(dbg1), rms(theirs)
    print(f"rms error vs float64: packed {e_prod:.3g}, debug {e_dbg:.3g}, torch cpu f16 {e_torch:.3g}")
    assert e_prod > e_dbg             # really f16 arithmetic: coarser than f32 accumulation ...
    assert e_prod <= 8 * e_torch and e_prod <= 8 * e_dbg, (e_prod, e_dbg, e_torch)   # ... but not by much


def test_packed_f16_in_autodiff_transposes(monkeypatch):
    """The gradients of a @ b (grad @ b^T, a^T @ grad) run through the packed path under prod."""
    torch = pytest.importorskip("torch")
    _need_f16()
    _fresh(monkeypatch, "off")
    keys = launch_keys(monkeypatch)
    a = R.standard_normal((2, 37, 70)).astype(np.float16)
    b = R.standard_normal((70, 45)).astype(np.float16)
    g = R.standard_normal((2, 37, 45)).astype(np.float16)
    with sc.tier("fast"):
        ta = sc.tensor(a, device=WG, dtype="f16", requires_grad=True)
        tb = sc.tensor(b, device=WG, dtype="f16", requires_grad=True)
        tg = sc.tensor(g, device=WG, dtype="f16")
        ((ta @ tb) * tg).sum().backward()
        ga, gb = ta.grad.numpy(), tb.grad.numpy()
    xa = torch.tensor(a.astype(np.float64), requires_grad=True)
    xb = torch.tensor(b.astype(np.float64), requires_grad=True)
    ((xa @ xb) * torch.tensor(g.astype(np.float64))).sum().backward()
    # grad_a = g @ b^T (K = 45), grad_b = sum over batch of a^T @ g (K = 2 * 37); the bound as above
    # with BK = 16 on float64 |g| |b| sums, plus the f16 rounding of the summed batch terms
    for got, want, absum in ((ga, xa.grad.numpy(), np.abs(g.astype(np.float64)) @ np.abs(b.astype(np.float64)).T),
                             (gb, xb.grad.numpy(), np.einsum("bmk,bmn->kn", np.abs(a.astype(np.float64)),
                                                             np.abs(g.astype(np.float64))))):
        n = 17
        tol = 2 * U16 * np.abs(want) + n * U16 / (1 - n * U16) * absum + 1e-6
        assert got.shape == want.shape
        err = np.abs(got.astype(np.float64) - want)
        assert np.all(err <= tol), float((err / tol).max())
    # fwd and both grads (the grads read an operand transposed: keys end in +ta / +tb)
    assert sum(k.startswith("matmul:") and ":f16+h16" in k for k in keys) >= 3


@pytest.mark.parametrize("tier,key", [("debug", "matmul:mid_pf:f16"), ("prod", "matmul:mid_pf:f16"),
                                      ("fast", "matmul:mid:f16+h16")])
def test_tier_picks_the_f16_path(tier, key, monkeypatch):
    """debug and prod: f16 storage with f32 math on the table's tile; fast: the packed-f16 kernel on that
    tile's plain twin (PACKED_PLAIN); f32 never packs."""
    _need_f16()
    _fresh(monkeypatch, "off")
    keys = launch_keys(monkeypatch)
    a = R.standard_normal((100, 70)).astype(np.float16)
    b = R.standard_normal((70, 90)).astype(np.float16)
    check_packed(mm16(a, b, tier), a, b, 16)
    with sc.tier(tier):
        (sc.tensor(a.astype(np.float32), device=WG) @ sc.tensor(b.astype(np.float32), device=WG)).numpy()
    assert [k.removesuffix("+roab") for k in keys if k.startswith("matmul:")] == [key, "matmul:mid_pf:f32"]


def test_the_packed_table_takes_plain_tiles():
    """Under packed f16 the table's prefetching / double-buffered tiles become their plain twins (the same
    tile size, so the same splits); unpacked f16 and f32 keep the prefetching ones."""
    from scellis_jupyter.backends.wgpu.kernels.matmul_tune import PACKED_PLAIN, default_config
    for shape in ((100, 90, 1, 70), (4096, 4096, 1, 512), (384, 1536, 1, 16384), (384, 384, 1, 16384), (20, 20, 1, 0)):
        v, s = default_config(*shape)
        pv, ps = default_config(*shape, "f16", packed=True)
        assert (pv, ps) == (PACKED_PLAIN.get(v, v), s), shape
        assert "pf" not in VARIANTS[pv][5] and "db" not in VARIANTS[pv][5]
        assert VARIANTS[pv][:2] == VARIANTS[v][:2]
        assert default_config(*shape, "f16") == (v, s)


@pytest.mark.parametrize("fold", ["", "16", "24"])
def test_packed_partials_fold_every_fold_products(fold, monkeypatch):
    """SCELLIS_MATMUL_FOLD: the products an f16 partial sums before its fold into f32 (whole staged tiles of
    BK = 8 here). 4096 = 64 x 64 per product: 8 of them sum to 32768 in f16, 16 overflow (65536 > 65504). K = 32
    with the second half negated sums to 0 when partials hold 8 products, to inf - inf = NaN when they hold 16,
    and to inf when they hold 24 (the first partial overflows, the second is the last 8, -32768); a last tile
    short of the interval is folded after the loop (K = 40, only its last 8 k non-zero)."""
    _need_f16()
    from scellis_jupyter.backends.wgpu.kernels.matmul import fold_tiles
    _fresh(monkeypatch, "big")
    monkeypatch.setenv("SCELLIS_MATMUL_FOLD", fold)
    products = 8 * fold_tiles(8)
    assert products == {"": 8, "16": 16, "24": 24}[fold]
    a = np.full((4, 32), 64.0, np.float16)
    b = np.full((32, 4), 64.0, np.float16)
    b[16:] = -64.0
    got = mm16(a, b, "fast")
    assert np.array_equal(mm16(a, b, "debug"), np.zeros((4, 4), np.float16))
    if products == 8:
        assert np.array_equal(got, np.zeros((4, 4), np.float16))
    elif products == 16:
        assert np.isnan(got).all(), got
    else:
        assert np.array_equal(got, np.full((4, 4), np.inf, np.float16)), got
    a = np.ones((4, 40), np.float16)
    b = np.zeros((40, 4), np.float16)
    b[32:] = 1.0
    assert np.array_equal(mm16(a, b, "fast"), np.full((4, 4), 8.0, np.float16))
    assert any(k.startswith("matmul:big:f16+h16") for k in WG.impl._pipelines)


def test_fold_setting_is_checked(monkeypatch):
    from scellis_jupyter.backends.wgpu.kernels.matmul import fold_tiles
    from scellis_jupyter.errors import SettingError
    for bad in ("x", "0", "-8"):
        monkeypatch.setenv("SCELLIS_MATMUL_FOLD", bad)
        with pytest.raises(SettingError, match="SCELLIS_MATMUL_FOLD"):
            fold_tiles(8)
    monkeypatch.setenv("SCELLIS_MATMUL_FOLD", "4")
    assert fold_tiles(8) == 1 and fold_tiles(16) == 1     # at least one whole tile
    monkeypatch.setenv("SCELLIS_MATMUL_FOLD", "40")
    assert fold_tiles(8) == 5 and fold_tiles(16) == 2
