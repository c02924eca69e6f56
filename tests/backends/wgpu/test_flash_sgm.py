"""Flash attention on the matrix units (kernels/flash_sgm.wgsl, launched by kernels/attention.py): forward and every
gradient through the emulation (SCELLIS_WGPU_SUBGROUP_MATRIX_EMULATE: plain WGSL of the builtins' semantics, as
test_matmul_sgm.py), against a dense float64 reference, on whichever implementation runs the suite (f16 where the
adapter has shader-f16; f32 through an f32 configuration everywhere, SwiftShader included).

Shapes cross every edge of the blocks: rows and keys not multiples of BR or BC, lq < lk and lq > lk under causal
(rows with no allowed key: out 0, lse -inf, no gradient), several heads, and keys whose scores grow block by block
so the kernel's rare rescale of O runs. Tolerance relative to each result's largest entry: f16 2e-3 (inputs
f16-exact; P and dS rounded to f16, 2^-11 each; outputs rounded to f16), f32 1e-4 (f32 sums over at most 50 keys)."""
import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter import determinism, ops
from scellis_jupyter.backends.wgpu.kernels import flash_sgm, matmul_sgm
from fixtures.attention import dense
from fixtures.devices import WG, needs_wgpu

pytestmark = needs_wgpu
TOL = {"f16": 2e-3, "f32": 1e-4}
NP = {"f16": np.float16, "f32": np.float32}


def _emu(monkeypatch, dtype):
    """4x4x4 fragments on 8-invocation subgroups (BR 16 rows a workgroup, BC 8), in the operands' type, and the
    kernels asked for. (Small fragments: an emulated fragment is a private array every invocation holds, and the
    dk/dv kernel's eight 8x8 ones overflow what llvmpipe gives an invocation, as test_matmul_sgm.py says; the real
    ones are registers of the matrix units.) Every kernel compiles in 5-25 s on llvmpipe, so the f16 set is the
    causal one (f16 and f32 share the template but for the type; SwiftShader, without shader-f16, runs f32)."""
    if dtype == "f16" and not WG.impl.has_f16:
        pytest.skip("the adapter lacks shader-f16")
    monkeypatch.setenv("SCELLIS_WGPU_SUBGROUP_MATRIX_EMULATE", f"{dtype}:4x4x4:8")
    monkeypatch.setenv("SCELLIS_ATTENTION_KERNEL", "sgm")
    WG.impl.forget_programs()


@pytest.fixture(autouse=True)
def _forget():
    yield
    WG.impl.forget_programs()


def _run(dtype, q, k, v, g, causal, tier="prod", **kw):
    with determinism.tier(tier):
        ts = [sc.tensor(a, dtype=dtype, device=WG, requires_grad=True) for a in (q, k, v)]
        o = ops.attention(*ts, causal=causal, **kw)
        o.backward(sc.tensor(g, dtype=dtype, device=WG))
        return [o.numpy()] + [t.grad.numpy() for t in ts]


def _case(seed, batch, lq, lk, d, dtype):
    r = np.random.default_rng(seed)
    return [r.standard_normal(batch + s).astype(NP[dtype]).astype(np.float32)
            for s in ((lq, d), (lk, d), (lk, d), (lq, d))]


def _flash_sgm_kernels() -> set:
    return {k.split(":")[1] for k in WG.impl._pipelines if k.startswith("flash_sgm:")}


def _rel(got, want) -> float:
    return float(np.abs(np.asarray(got, np.float64) - want).max() / max(np.abs(want).max(), 1e-30))


def _check(dtype, got, q, k, v, g, causal):
    for what, x, y in zip(("out", "dq", "dk", "dv"), got, dense(q, k, v, g, causal, None, 1 / np.sqrt(q.shape[-1]))):
        assert _rel(x, y) < TOL[dtype], (what, _rel(x, y))


@pytest.mark.parametrize("dtype,lq,lk,causal", [("f32", 37, 45, True), ("f32", 45, 37, True), ("f32", 40, 50, False),
                                                ("f16", 37, 45, True), ("f16", 45, 37, True)])
def test_forward_and_gradients_on_the_matrix_units(monkeypatch, dtype, lq, lk, causal):
    """Two heads of each of two batches, head size 8: partial row and key blocks, causal offsets both ways (lq > lk
    leaves the first rows no key), all four results against float64; only the matrix-unit kernels ran."""
    _emu(monkeypatch, dtype)
    q, k, v, g = _case(1, (2, 2), lq, lk, 8, dtype)
    WG.impl._pipelines = {}
    got = _run(dtype, q, k, v, g, causal)
    assert _flash_sgm_kernels() == {"fwd", "dq", "dkdv"}, sorted(WG.impl._pipelines)
    assert not any(k.startswith(("matmul", "flash_fwd", "flash_bwd")) for k in WG.impl._pipelines)
    _check(dtype, got, q, k, v, g, causal)
    if lq > lk and causal:           # rows before the first key: no output, no gradient
        dead = lq - lk
        assert not np.any(got[0][..., :dead, :]) and not np.any(got[1][..., :dead, :])


def test_a_growing_maximum_rescales_the_output(monkeypatch):
    """Scores (base 2) of about 0 on the first 48 keys, then one key at 9 and the rest far below: the row maximum
    grows by more than the kernel's bound of 8 in a later block, so it stores O, rescales its rows by about 2^-9
    and loads them back. The first keys still weigh some 48 / 560 of the output (v positive, so their share does
    not cancel): a skipped or wrong rescale would be far outside the tolerance. (f32: the f16 kernels are the same
    template, and f16 dS, summed over rows that nearly cancel here, would need a looser check of dq and dk.)"""
    dtype = "f32"
    _emu(monkeypatch, dtype)
    q, k, v, g = _case(2, (1,), 20, 64, 8, dtype)
    unit = 1 / (1 / np.sqrt(8) * 1.4426950408889634)         # key entry giving a base-2 score of 1 against q = e0
    q = q * 0.05                                               # rows near e0: scores within +-0.3 of the plan
    q[..., 0] = 1
    k[0, :, 0] = np.where(np.arange(64) < 48, 0.0, -40.0) * unit
    k[0, 50, 0] = 9 * unit
    v = np.abs(v)
    q, k = (a.astype(NP[dtype]).astype(np.float32) for a in (q, k))
    WG.impl._pipelines = {}
    got = _run(dtype, q, k, v, g, False)
    assert _flash_sgm_kernels() == {"fwd", "dq", "dkdv"}
    _check(dtype, got, q, k, v, g, False)
    late = dense(q, k[:, 48:], v[:, 48:], g, False, None, 1 / np.sqrt(8))[0]   # without the first keys
    assert np.abs(late - got[0]).max() > 10 * TOL[dtype] * np.abs(got[0]).max()


@pytest.mark.parametrize("why", ["mask", "dropout", "debug", "auto", "head", "scores", "offset"])
def test_what_stays_on_the_other_kernels(monkeypatch, why):
    """A bool mask, dropout, the debug tier, SCELLIS_ATTENTION_KERNEL unset (the kernels are opt-in), a head size
    off the fragment grid, SCELLIS_ATTENTION_PATH=scores and an operand not 16-byte aligned keep the score path
    or the SIMT flash kernels (the launcher's rule, attention._sgm_plans; those paths have tests of their own)."""
    from types import SimpleNamespace
    from scellis_jupyter.backends.wgpu.kernels import attention
    _emu(monkeypatch, "f32")
    be = WG.impl
    d = 6 if why == "head" else 8
    op = SimpleNamespace(attrs={"dropout": 0.2 if why == "dropout" else 0.0})
    store = SimpleNamespace(dtype="f32", offset=4 if why == "offset" else 256)
    if why == "auto":
        monkeypatch.delenv("SCELLIS_ATTENTION_KERNEL")
    if why == "scores":
        monkeypatch.setenv("SCELLIS_ATTENTION_PATH", "scores")
    old = be.tier
    be.tier = "debug" if why == "debug" else "prod"
    try:
        plans = attention._sgm_plans(be, op, "f32", d, d, object() if why == "mask" else None, ("fwd", "dq", "dkdv"),
                                     [store] * 3)
        be.tier = "prod"
        monkeypatch.setenv("SCELLIS_ATTENTION_KERNEL", "sgm")
        monkeypatch.delenv("SCELLIS_ATTENTION_PATH", raising=False)
        base = attention._sgm_plans(be, SimpleNamespace(attrs={}), "f32", 8, 8, None, ("fwd", "dq", "dkdv"),
                                    [SimpleNamespace(dtype="f32", offset=256)] * 3)
    finally:
        be.tier = old
    assert plans is None and base is not None and set(base) == {"fwd", "dq", "dkdv"}


def test_blocks_fit_the_workgroup_memory():
    """The rule takes the largest BC (a multiple of the fragment sizes) whose workgroup memory fits: for d 64 on
    16x16x16 fragments, 64 / 32 / 32 (fwd / dq / dkdv) in the H100's 48 KiB; in 32 KiB fwd and dq with smaller
    steps and no dk/dv kernel (so the backward keeps the other kernels), which 8x8x8 fragments (32 rows a
    workgroup) do fit; none in 8 KiB; none for head sizes off the fragment grid."""
    c16, c8 = matmul_sgm.Config("f16", 16, 16, 16, 32), matmul_sgm.Config("f16", 8, 8, 8, 32)

    class Be:
        def __init__(self, smem):
            self.limits = {"max-compute-workgroup-storage-size": smem, "max-compute-invocations-per-workgroup": 256,
                           "max-compute-workgroup-size-x": 256}

    def plan(cfg, smem, kind, d):
        old = matmul_sgm.config_for
        matmul_sgm.config_for = lambda be, dtype, tier: cfg
        try:
            return flash_sgm.plan(Be(smem), kind, "f16", d, d, "prod")
        finally:
            matmul_sgm.config_for = old
    assert [plan(c16, 49152, kd, 64).bc for kd in flash_sgm.KINDS] == [64, 32, 32]
    assert [plan(c16, 32768, kd, 64) and plan(c16, 32768, kd, 64).bc for kd in flash_sgm.KINDS] == [16, 16, None]
    assert [plan(c8, 32768, kd, 64).br for kd in flash_sgm.KINDS] == [32, 32, 32]
    for cfg in (c16, c8):
        for kd in flash_sgm.KINDS:
            for smem in (49152, 32768):
                pl = plan(cfg, smem, kd, 64)
                assert pl is None or flash_sgm.smem_bytes(cfg, kd, 64, 64, pl.bc) <= smem
            assert plan(cfg, 8192, kd, 64) is None
            assert plan(cfg, 49152, kd, 24 if cfg is c16 else 12) is None
