"""The environment-selected flash-attention kernels (kernels/flash_fwd_op.wgsl, flash_bwd_op.wgsl:
SCELLIS_ATTENTION_FWD / _BWD / _DKDV / _DQ = op[:RGxCGxNY], SCELLIS_ATTENTION_SG) against a dense
float64 numpy reference written here: out, lse (through the gradients, which read it) and dq, dk, dv,
for every selectable variant that fits this adapter's workgroup memory; lengths that are not multiples of
the tiles, causal (Lq < Lk, Lq > Lk with empty rows) and padding masks, head sizes 6/10 (scalar loads),
16, 32, 48, 64, f16 storage, dropout with the project's Philox mask (so the same mask as
flash_fwd.wgsl / flash_bwd.wgsl, whose tests use the same reference), determinism. Each case checks from
the pipeline keys that the op kernels (not the default ones) ran.

Tolerances: f32 rtol 2e-4 / atol 2e-5 (f32 accumulation over at most a few hundred O(1) terms); f16
storage rtol 3e-2 / atol 8e-3 against the reference on the same f16-rounded inputs.
"""
import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter import ops
from scellis_jupyter.backends.wgpu.kernels.attention_op import bwd_cfg, op_cfg
from scellis_jupyter.rng.generator import Generator, Stream, base_words
from scellis_jupyter.rng.philox import bits_to_uniform, stream_bits

WG = sc.device("wgpu")
BE = WG.impl
ENV = ("SCELLIS_ATTENTION_FWD", "SCELLIS_ATTENTION_BWD", "SCELLIS_ATTENTION_DKDV", "SCELLIS_ATTENTION_DQ",
       "SCELLIS_ATTENTION_SG")

VARIANTS = {  # environment of one variant (the sweep's settings)
    "op-sg": {"SCELLIS_ATTENTION_FWD": "op", "SCELLIS_ATTENTION_BWD": "op"},
    "op-nosg-1x1x8-dq2x1x4": {"SCELLIS_ATTENTION_FWD": "op:1x1x8", "SCELLIS_ATTENTION_SG": "off",
                              "SCELLIS_ATTENTION_DKDV": "op:1x1x4", "SCELLIS_ATTENTION_DQ": "op:2x1x4"},
    "op-cg2": {"SCELLIS_ATTENTION_FWD": "op:2x2x2", "SCELLIS_ATTENTION_DKDV": "op:1x2x2",
               "SCELLIS_ATTENTION_DQ": "op:1x2x4"},
}


@pytest.fixture
def variant(request, monkeypatch):
    for k in ENV:
        monkeypatch.delenv(k, raising=False)
    for k, val in VARIANTS[request.param].items():
        monkeypatch.setenv(k, val)
    BE.use_subgroups(BE.subgroups or "subgroup" in BE.features)   # forget recorded programs
    yield request.param
    for k in ENV:
        monkeypatch.delenv(k, raising=False)
    BE.use_subgroups("subgroup" in BE.features)


def dense(q, k, v, g, causal, mask, scale, z=None):
    """softmax(q k^T scale | allowed) (times the keep factors z on the v side) v, and its gradients for
    upstream g, in float64 with one dense matrix."""
    q, k, v, g = (np.asarray(a, np.float64) for a in (q, k, v, g))
    lq, lk = q.shape[-2], k.shape[-2]
    s = q @ np.swapaxes(k, -1, -2) * scale
    allow = np.ones(s.shape, bool)
    if causal:
        allow &= np.tril(np.ones((lq, lk), bool), k=lk - lq)
    if mask is not None:
        allow &= np.broadcast_to(mask, s.shape)
    s = np.where(allow, s, -np.inf)
    mx = np.max(s, axis=-1, keepdims=True)
    e = np.where(allow, np.exp(s - np.where(np.isfinite(mx), mx, 0.0)), 0.0)
    den = e.sum(-1, keepdims=True)
    p = np.where(den > 0, e / np.where(den > 0, den, 1.0), 0.0)
    zz = np.ones(p.shape) if z is None else z.reshape(p.shape)
    o = (p * zz) @ v
    dp = (g @ np.swapaxes(v, -1, -2)) * zz
    ds = p * (dp - np.sum(g * o, -1, keepdims=True))
    return o, ds @ k * scale, np.swapaxes(ds, -1, -2) @ q * scale, np.swapaxes(p * zz, -1, -2) @ g


def _run(q, k, v, g, causal, mask, dtype="f32", p=0.0, stream=None):
    ts = [sc.tensor(a, dtype=dtype, device=WG, requires_grad=True) for a in (q, k, v)]
    m = sc.tensor(mask, device=WG) if mask is not None else None
    o = ops.attention(*ts, causal=causal, mask=m, dropout=p, gen=stream)
    o.backward(sc.tensor(g, dtype=dtype, device=WG))
    return [o.numpy()] + [t.grad.numpy() if hasattr(t.grad, "numpy") else sc.Tensor(t.grad, WG).numpy() for t in ts]


def _case(seed, batch, lq, lk, d, dv, mshape, dtype="f32"):
    r = np.random.default_rng(seed)
    arrs = [r.standard_normal(batch + shp).astype(np.float32) for shp in ((lq, d), (lk, d), (lk, dv), (lq, dv))]
    if dtype == "f16":
        arrs = [a.astype(np.float16).astype(np.float32) for a in arrs]
    return arrs, ((r.random(mshape) > 0.3) if mshape is not None else None)


def _op_ran(d, dv, causal):
    """Assert every op kernel the environment selects (and that fits here) ran for this shape."""
    tail = f":d={d}:dv={dv}:causal={causal}"
    keys = list(BE._pipelines)
    want = [("flash_fwd_op:", op_cfg(BE, d, dv)), ("flash_bwd_op:dq:", bwd_cfg(BE, "dq", d, dv)),
            ("flash_bwd_op:dkdv:", bwd_cfg(BE, "dkdv", d, dv))]
    ran = 0
    for prefix, cfg in want:
        if cfg is not None:
            assert any(k.startswith(prefix) and k.endswith(tail) for k in keys), (prefix, tail)
            ran += 1
    return ran


CASES = {  # batch, lq, lk, d, dv, causal, mask shape
    "d64-odd-lengths": ((2,), 70, 93, 64, 64, False, None),
    "d64-causal-square": ((2,), 100, 100, 64, 64, True, None),
    "d32-causal-lq<lk": ((1, 2), 45, 130, 32, 32, True, None),
    "d16-key-padding": ((2, 2), 67, 67, 16, 16, False, (2, 1, 1, 67)),
    "d64-causal-mask-dv48": ((2,), 50, 50, 64, 48, True, (50, 50)),
    "d48-causal-lq>lk-empty-rows": ((2,), 80, 40, 48, 48, True, None),
    "d6-dv10-scalar-loads": ((2,), 33, 29, 6, 10, True, None),
}


@pytest.mark.parametrize("variant", list(VARIANTS), indirect=True)
@pytest.mark.parametrize("name", list(CASES))
def test_op_kernels_match_dense_float64(variant, name):
    batch, lq, lk, d, dv, causal, ms = CASES[name]
    (q, k, v, g), mask = _case(len(name), batch, lq, lk, d, dv, ms)
    got = _run(q, k, v, g, causal, mask)
    ran = _op_ran(d, dv, causal)
    if variant == "op-sg":      # the default op tiles fit every head size here
        assert ran == 3, ran
    want = dense(q, k, v, g, causal, mask, 1.0 / np.sqrt(d))
    for what, x, y in zip(("out", "dq", "dk", "dv"), got, want):
        assert x.shape == y.shape, what
        np.testing.assert_allclose(x, y, rtol=2e-4, atol=2e-5, err_msg=f"{variant} {name}: {what}")


@pytest.mark.skipif(not BE.has_f16, reason="adapter lacks shader-f16")
@pytest.mark.parametrize("variant", ["op-sg"], indirect=True)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_op_kernels_f16_storage(variant, causal):
    (q, k, v, g), mask = _case(11, (2,), 75, 90, 64, 64, (1, 90), "f16")
    got = _run(q, k, v, g, causal, mask, "f16")
    assert _op_ran(64, 64, causal) == 3
    want = dense(q, k, v, g, causal, mask, 1.0 / 8.0)
    for what, x, y in zip(("out", "dq", "dk", "dv"), got, want):
        assert x.dtype == np.float16, what
        np.testing.assert_allclose(x.astype(np.float32), y, rtol=3e-2, atol=8e-3, err_msg=what)


def _keep(key, offset, nh, lq, lk, p):
    """Keep factors [nh, lq, lk] from the project's numpy Philox: word (h * lq + i) * lk + j."""
    u = bits_to_uniform(stream_bits(key, offset, nh * lq * lk)).reshape(nh, lq, lk)
    return np.where(u >= np.float32(p), np.float32(1.0 / (1.0 - p)), np.float32(0.0))


@pytest.mark.parametrize("variant", ["op-sg", "op-nosg-1x1x8-dq2x1x4"], indirect=True)
@pytest.mark.parametrize("based", [False, True], ids=["offset", "step-base"])
def test_op_dropout_matches_dense_with_the_philox_mask(variant, based):
    """Forward and every gradient against float64 with the mask drawn from numpy Philox (the mask the
    default flash kernels are tested against); step-base: the stream position from a device input
    past 2^32."""
    (q, k, v, g), mask = _case(21, (2, 2), 70, 53, 32, 32, (70, 53))
    p, gen = 0.25, Generator(11)
    gen.positions["attn"] = 6
    pos = 2 ** 32 + 5 if based else 0
    stream = Stream(gen, "attn", base=sc.tensor(base_words(pos), device=WG).node) if based else gen.stream("attn")
    got = _run(q, k, v, g, True, mask, p=p, stream=stream)
    assert _op_ran(32, 32, True) >= 2
    z = _keep(stream.key, 6 + pos, 4, 70, 53, p)
    want = dense(q, k, v, g, True, mask, 1.0 / np.sqrt(32), z)
    for what, x, y in zip(("out", "dq", "dk", "dv"), got, want):
        np.testing.assert_allclose(x, y, rtol=2e-4, atol=2e-5, err_msg=f"{variant}: {what}")


@pytest.mark.parametrize("variant", ["op-sg"], indirect=True)
def test_op_kernels_are_deterministic(variant):
    (q, k, v, g), mask = _case(5, (2,), 90, 77, 64, 64, (90, 77))
    a = _run(q, k, v, g, True, mask)
    BE.use_subgroups(BE.subgroups)      # forget the recorded program: the second run launches again
    b = _run(q, k, v, g, True, mask)
    assert _op_ran(64, 64, True) == 3
    for x, y in zip(a, b):
        assert np.array_equal(x, y)
