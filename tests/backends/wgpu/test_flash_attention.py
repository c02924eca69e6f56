"""The register-tiled flash-attention kernels (kernels/flash_fwd.wgsl, flash_bwd.wgsl) against a dense
float64 numpy reference written here: forward and every gradient, lengths that are not multiples of
the tiles, causal and padding masks, head sizes 32 and 64 (vec4 loads) and odd ones (scalar loads),
f16 storage, determinism. Each case also checks that the flash kernels (not the row-wise fallback) ran.

Tolerances: f32 rtol 2e-4 / atol 2e-5 (f32 accumulation over at most a few hundred terms of O(1)
values); f16 storage rtol 3e-2 / atol 8e-3 against the reference on the same f16-rounded inputs (one
f16 rounding of out, p-weighted sums, and of each gradient). Every test forces the flash path
(SCELLIS_ATTENTION_PATH=flash): short f32 sequences would otherwise take the materialized-score path.
"""
import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter import ops
from fixtures.attention import dense

WG = sc.device("wgpu")


@pytest.fixture(autouse=True, scope="module")
def _flash_path():
    mp = pytest.MonkeyPatch()
    mp.setenv("SCELLIS_ATTENTION_PATH", "flash")
    WG.impl.forget_programs()
    yield
    mp.undo()
    WG.impl.forget_programs()


def _run(q, k, v, g, causal, mask, dtype):
    ts = [sc.tensor(a, dtype=dtype, device=WG, requires_grad=True) for a in (q, k, v)]
    m = sc.tensor(mask, device=WG) if mask is not None else None
    o = ops.attention(*ts, causal=causal, mask=m)
    o.backward(sc.tensor(g, dtype=dtype, device=WG))
    grads = [t.grad.numpy() if hasattr(t.grad, "numpy") else sc.Tensor(t.grad, WG).numpy() for t in ts]
    return [o.numpy()] + grads


def _case(seed, batch, lq, lk, d, dv, mshape, dtype="f32"):
    r = np.random.default_rng(seed)
    arrs = [r.standard_normal(batch + shp).astype(np.float32) for shp in ((lq, d), (lk, d), (lk, dv), (lq, dv))]
    if dtype == "f16":
        arrs = [a.astype(np.float16).astype(np.float32) for a in arrs]
    mask = (r.random(mshape) > 0.3) if mshape is not None else None
    return arrs, mask


def _flash_ran(vec):
    keys = list(WG.impl._pipelines)
    for kind in ("flash_fwd:", "flash_bwd:dq:", "flash_bwd:dkdv:"):
        assert any(k.startswith(kind) and f"vec={vec}" in k for k in keys), (kind, vec)


CASES = {  # batch, lq, lk, d, dv, causal, mask shape, vec4 loads
    "d64-odd-lengths": ((2,), 70, 93, 64, 64, False, None, True),
    "d64-causal-square": ((2,), 100, 100, 64, 64, True, None, True),
    "d32-causal-lq<lk": ((1, 2), 45, 130, 32, 32, True, None, True),
    "d32-key-padding": ((2, 2), 67, 67, 32, 32, False, (2, 1, 1, 67), True),
    "d64-causal-mask-dv48": ((2,), 50, 50, 64, 48, True, (50, 50), True),
    "causal-lq>lk-empty-rows": ((2,), 80, 40, 64, 64, True, None, True),
    "d6-dv10-scalar-loads": ((2,), 33, 29, 6, 10, True, None, False),
    "one-row-one-key": ((3,), 1, 1, 32, 32, False, None, True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_flash_matches_dense_float64(name):
    batch, lq, lk, d, dv, causal, ms, vec = CASES[name]
    (q, k, v, g), mask = _case(len(name), batch, lq, lk, d, dv, ms)
    got = _run(q, k, v, g, causal, mask, "f32")
    _flash_ran(vec)
    want = dense(q, k, v, g, causal, mask, 1.0 / np.sqrt(d))
    for what, x, y in zip(("out", "dq", "dk", "dv"), got, want):
        assert x.shape == y.shape, what
        np.testing.assert_allclose(x, y, rtol=2e-4, atol=2e-5, err_msg=f"{name}: {what}")


@pytest.mark.skipif(not WG.impl.has_f16, reason="adapter lacks shader-f16")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_f16_storage(causal):
    (q, k, v, g), mask = _case(11, (2,), 75, 90, 64, 64, (1, 90), "f16")
    got = _run(q, k, v, g, causal, mask, "f16")
    _flash_ran(True)
    want = dense(q, k, v, g, causal, mask, 1.0 / 8.0)
    for what, x, y in zip(("out", "dq", "dk", "dv"), got, want):
        assert x.dtype == np.float16, what
        np.testing.assert_allclose(x.astype(np.float32), y, rtol=3e-2, atol=8e-3, err_msg=what)


def test_flash_is_deterministic():
    (q, k, v, g), mask = _case(5, (2,), 90, 77, 64, 64, (90, 77))
    a = _run(q, k, v, g, True, mask, "f32")
    b = _run(q, k, v, g, True, mask, "f32")
    _flash_ran(True)
    for x, y in zip(a, b):
        assert np.array_equal(x, y)


# ---- dropout --------------------------------------------------------------------------------------
from scellis_jupyter.rng.generator import Generator, Stream, base_words  # noqa: E402
from fixtures.attention import philox_keep as _keep  # noqa: E402


def _run_drop(q, k, v, g, causal, mask, p, stream):
    ts = [sc.tensor(a, device=WG, requires_grad=True) for a in (q, k, v)]
    m = sc.tensor(mask, device=WG) if mask is not None else None
    o = ops.attention(*ts, causal=causal, mask=m, dropout=p, gen=stream)
    o.backward(sc.tensor(g, device=WG))
    return [o.numpy()] + [t.grad.numpy() if hasattr(t.grad, "numpy") else sc.Tensor(t.grad, WG).numpy() for t in ts]


@pytest.mark.parametrize("based", [False, True], ids=["offset", "step-base"])
def test_dropout_matches_dense_with_the_philox_mask(based, mul64):
    """Forward and every gradient against float64 with the mask drawn from numpy Philox; the backward
    can only match if it regenerates the forward's mask. step-base: the stream position comes from a
    device input past 2^32 (64-bit word offsets with carry)."""
    (q, k, v, g), mask = _case(21, (2, 2), 70, 53, 64, 64, (70, 53))
    p, gen = 0.25, Generator(11)
    gen.positions["attn"] = 6
    pos = 2 ** 32 + 5 if based else 0
    stream = Stream(gen, "attn", base=sc.tensor(base_words(pos), device=WG).node) if based else gen.stream("attn")
    key = stream.key
    got = _run_drop(q, k, v, g, True, mask, p, stream)
    _flash_ran(True)
    z = _keep(key, 6 + pos, 4, 70, 53, p)
    want = dense(q, k, v, g, True, mask, 1.0 / 8.0, z)
    for what, x, y in zip(("out", "dq", "dk", "dv"), got, want):
        np.testing.assert_allclose(x, y, rtol=2e-4, atol=2e-5, err_msg=what)


@pytest.mark.parametrize("tile", [None, "4x1"], ids=["table-tiles", "4x1-tiles"])
def test_dropout_mask_over_many_tiles(tile, monkeypatch, mul64):
    """Many key and query tiles, a stream offset whose low word wraps inside the op's words, and a key length
    that is not a multiple of 4 (so each row's words start at another lane of a Philox block), with the table's
    tiles and with 16-key 4x1 tiles, give the numpy Philox mask's results forward and backward."""
    if tile:
        monkeypatch.setenv("SCELLIS_ATTENTION_TILE_FWD", tile)
        monkeypatch.setenv("SCELLIS_ATTENTION_TILE_DQ", tile)
        WG.impl.forget_programs()
    (q, k, v, g), _ = _case(33, (3,), 150, 203, 32, 32, None)
    p, gen = 0.3, Generator(5)
    gen.positions["attn"] = 2 ** 32 - 7        # the offset's low word wraps inside the op's words
    stream = gen.stream("attn")
    key = stream.key
    try:
        got = _run_drop(q, k, v, g, False, None, p, stream)
    finally:
        WG.impl.forget_programs()
    z = _keep(key, 2 ** 32 - 7, 3, 150, 203, p)
    want = dense(q, k, v, g, False, None, 1.0 / np.sqrt(32), z)
    for what, x, y in zip(("out", "dq", "dk", "dv"), got, want):
        np.testing.assert_allclose(x, y, rtol=2e-4, atol=2e-5, err_msg=what)


def test_dropout_statistics_and_forward_backward_agree():
    """q = k = 0 makes every probability 1/Lk and v = I puts pair (i, j)'s keep factor into out[i, j] * Lk:
    the dropped fraction is p within 5 binomial sigmas, kept entries are exactly 1/(1-p), and dv (with
    dout = 1) is the column sums of that same mask over Lk."""
    nh, lq, lk, p = 4, 96, 64, 0.4
    q = np.zeros((nh, lq, 64), np.float32)
    k = np.zeros((nh, lk, 64), np.float32)
    v = np.broadcast_to(np.eye(lk, 64, dtype=np.float32), (nh, lk, 64)).copy()
    g = np.ones((nh, lq, 64), np.float32)
    out, _, _, dv = _run_drop(q, k, v, g, False, None, p, Generator(3).stream("attn"))
    z = out * lk
    kept = z != 0
    n = kept.size
    assert abs((~kept).mean() - p) < 5 * np.sqrt(p * (1 - p) / n), (~kept).mean()
    np.testing.assert_allclose(z[kept], 1.0 / (1.0 - p), rtol=1e-6)
    np.testing.assert_allclose(dv[:, :, 0], z.sum(axis=1) / lk, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(kept, _keep(Generator(3).stream("attn").key, 0, nh, lq, lk, p) != 0)
    # a different stream position draws a different mask
    gen = Generator(3)
    gen.positions["attn"] = nh * lq * lk
    out2 = _run_drop(q, k, v, g, False, None, p, gen.stream("attn"))[0]
    assert not np.array_equal(out2 != 0, kept)


def test_dropout_needs_a_stream():
    (q, k, v, _), _ = _case(1, (1,), 4, 4, 8, 8, None)
    with pytest.raises(sc.ScellisError, match="random stream"):
        ops.attention(*[sc.tensor(a, device=WG) for a in (q, k, v)], dropout=0.1)
