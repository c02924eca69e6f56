"""Matmul epilogues on wgpu (llvmpipe in CI): bias, activation, residual and dropout run in the matmul's
store, for every tile variant, against float64 numpy, the unfused program and the reference device.

Tolerances: the product's error is bounded as in test_matmul.py (f32: 1e-4 * sqrt(sum_k a^2 b^2); f16:
1e-3 of |exact| plus 1e-3 of that magnitude, the f16 output rounding and f32 accumulation); the chain
adds one rounding per instruction of its dtype (f32: 2^-24, f16: 2^-11) of the magnitudes it combines
(bias, residual, result), taken as 4 roundings and scaled by gelu's Lipschitz bound 1.13 (1.2 here).
Against the unfused program on the same device only the compiler's contraction of the chain differs.
"""
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter import ops
from scellis_jupyter.backends.wgpu.kernels.matmul_tune import VARIANTS

from fixtures.devices import WG, needs_wgpu

pytestmark = needs_wgpu
REF = sc.device("reference")
R = np.random.default_rng(11)


def gelu64(x):
    from scipy.special import erf
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


CHAINS = {   # name: (chain on tensors, the same in float64 numpy)
    "bias_gelu": (lambda y, b, r: ops.gelu(y + b), lambda y, b, r: gelu64(y + b)),
    "bias_relu_residual": (lambda y, b, r: ops.relu(y + b) + r, lambda y, b, r: np.maximum(y + b, 0.0) + r),
}


def _run(dev, chain, a, w, b, r, dtype, epilogue: bool, monkeypatch):
    monkeypatch.setenv("SCELLIS_EPILOGUE", "1" if epilogue else "0")
    A, W, B, Rr = (sc.tensor(x, dtype=dtype, device=dev) for x in (a, w, b, r))
    before = dev.impl.dispatches if dev is WG else 0
    out = chain(A @ W, B, Rr).numpy()
    return out, (dev.impl.dispatches - before if dev is WG else 0)


def _check(got, a, w, b, r, ref64, dtype):
    if dtype == "f16":
        a, w, b, r = (x.astype(np.float16) for x in (a, w, b, r))
    a64, w64, b64, r64 = (x.astype(np.float64) for x in (a, w, b, r))
    exact = np.matmul(a64, w64)
    mag = np.sqrt(np.matmul(a64 * a64, w64 * w64))
    want = ref64(exact, b64, r64)
    side = np.abs(exact) + np.abs(b64) + np.abs(r64) + np.abs(want)
    if dtype == "f32":
        tol = 1.2 * 1e-4 * mag + 4 * 2.0 ** -24 * side + 1e-30
    else:
        tol = 1.2 * (1e-3 * np.abs(exact) + 1e-3 * mag) + 4 * 2.0 ** -11 * side
    err = np.abs(got.astype(np.float64) - want)
    assert got.shape == want.shape and np.all(err <= tol), (err - tol).max()


def _operands(batched: bool):
    if batched:     # a batch of odd matrices times a batch (z over workgroups, per-operand strides)
        a, w = R.standard_normal((3, 37, 29)), R.standard_normal((3, 29, 45))
    else:           # rows of a [2, 37, 29] activation times one weight: the linear layer's shape
        a, w = R.standard_normal((2, 37, 29)), R.standard_normal((29, 45))
    b = R.standard_normal(45)
    r = R.standard_normal((a.shape[0], 37, 45))
    return [x.astype(np.float32) for x in (a, w, b, r)]


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("chain", list(CHAINS))
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_variant_runs_the_chain_in_its_store(variant, chain, dtype, monkeypatch):
    monkeypatch.setenv("SCELLIS_MATMUL_TUNE", variant)
    ops_chain, ref64 = CHAINS[chain]
    args = _operands(batched=variant in ("mid", "big"))
    got, fused_n = _run(WG, ops_chain, *args, dtype, True, monkeypatch)
    _check(got, *args, ref64, dtype)
    unfused, unfused_n = _run(WG, ops_chain, *args, dtype, False, monkeypatch)
    assert fused_n == 1 and unfused_n == 2, (fused_n, unfused_n)     # the chain left no dispatch of its own
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == "f32" else dict(rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(got.astype(np.float64), unfused.astype(np.float64), **tol)


def test_k_split_runs_the_epilogue_after_the_last_partial(monkeypatch):
    monkeypatch.setenv("SCELLIS_MATMUL_TUNE", "mid:4")
    a = R.standard_normal((1, 40, 700)).astype(np.float32)
    w, b, r = R.standard_normal((700, 37)).astype(np.float32), R.standard_normal(37).astype(np.float32), \
        R.standard_normal((1, 40, 37)).astype(np.float32)
    ops_chain, ref64 = CHAINS["bias_relu_residual"]
    with sc.tier("prod"):            # a K-split changes the summation order: never under debug
        got, n = _run(WG, ops_chain, a, w, b, r, "f32", True, monkeypatch)
    assert n == 2            # the partial products, then their sum with the epilogue
    _check(got, a, w, b, r, ref64, "f32")


def test_dropout_in_the_store_draws_the_unfused_mask(monkeypatch, mul64):
    a = R.standard_normal((3, 33, 21)).astype(np.float32)
    w, b = R.standard_normal((21, 50)).astype(np.float32), R.standard_normal(50).astype(np.float32)

    def chain(dev, epilogue):
        monkeypatch.setenv("SCELLIS_EPILOGUE", "1" if epilogue else "0")
        A, W, B = (sc.tensor(x, device=dev) for x in (a, w, b))
        y = ops.dropout(abs(A @ W + B) + 0.5, 0.3, sc.rng.Generator(5))   # never 0 where kept
        return y.numpy()
    d0 = WG.impl.dispatches
    got = chain(WG, True)
    assert WG.impl.dispatches - d0 == 1         # the uniforms are drawn in the store: no philox dispatch
    unfused, ref = chain(WG, False), chain(REF, True)
    np.testing.assert_array_equal(got != 0, unfused != 0)
    np.testing.assert_array_equal(got != 0, ref != 0)
    keep = got != 0
    assert 0.2 < 1 - keep.mean() < 0.4
    exact = (np.abs(np.matmul(a.astype(np.float64), w.astype(np.float64)) + b) + 0.5) / 0.7
    mag = np.sqrt(np.matmul(a.astype(np.float64) ** 2, w.astype(np.float64) ** 2))
    assert np.all(np.abs(got[keep] - exact[keep]) <= (1.5e-4 * mag + 1e-6 * exact)[keep])


@pytest.mark.parametrize("where", ["store", "apart"])
def test_uniforms_drawn_in_the_epilogue_from_a_based_stream(where, monkeypatch, mul64):
    """A dropout read by the chain alone draws its uniforms in the store (no philox dispatch), at a stream
    base near 2^32 (the 64-bit carry) from a step input; `apart`: a casting chain, drawn by the philox
    kernel into scratch first. Masks equal the unfused program's and the reference's."""
    from scellis_jupyter.graph import functional as F
    from scellis_jupyter.rng.generator import Generator, Stream
    a = R.standard_normal((2, 17, 21)).astype(np.float32)
    w, b = R.standard_normal((21, 30)).astype(np.float32), R.standard_normal(30).astype(np.float32)
    base = np.array([0xFFFFFF00, 3], np.uint32)

    def run(dev, epilogue):
        monkeypatch.setenv("SCELLIS_EPILOGUE", "1" if epilogue else "0")
        A, W, B = (sc.tensor(x, device=dev) for x in (a, w, b))
        st = Stream(Generator(9), "dropout", base=sc.tensor(base, dtype="u32", device=dev).node)
        y = F.add(F.abs_(F.add(F.matmul(A.node, W.node), B.node)), 0.5)
        y = F.dropout(y, 0.4, st)
        if where == "apart":
            y = F.cast(y, "f16")
        before = dev.impl.dispatches if dev is WG else 0
        out = sc.Tensor(y, dev).numpy()
        return out, (dev.impl.dispatches - before if dev is WG else 0)
    (got, n), (unfused, n0), (ref, _) = run(WG, True), run(WG, False), run(REF, True)
    np.testing.assert_array_equal(got != 0, unfused != 0)
    np.testing.assert_array_equal(got != 0, ref != 0)
    assert 0.3 < 1 - (got != 0).mean() < 0.5
    assert n0 == 3 and n == (1 if where == "store" else 3), (n, n0)
    np.testing.assert_allclose(got.astype(np.float64), unfused.astype(np.float64), rtol=1e-6, atol=1e-6)


def test_a_chain_that_casts_runs_apart_with_the_same_values(monkeypatch):
    """An output dtype other than the matmul's: the product goes to scratch, the chain runs after it."""
    a, w = R.standard_normal((2, 19, 23)).astype(np.float32), R.standard_normal((23, 17)).astype(np.float32)
    b = R.standard_normal(17).astype(np.float32)

    def run(dev, epilogue):
        monkeypatch.setenv("SCELLIS_EPILOGUE", "1" if epilogue else "0")
        A, W, B = (sc.tensor(x, device=dev) for x in (a, w, b))
        return ((A @ W) * 2.0 + B).to("f16").numpy()
    got = run(WG, True)
    np.testing.assert_array_equal(got, run(WG, False))
    exact = np.matmul(a.astype(np.float64), w.astype(np.float64)) * 2.0 + b
    mag = np.sqrt(np.matmul(a.astype(np.float64) ** 2, w.astype(np.float64) ** 2))
    assert np.all(np.abs(got - exact) <= 2e-4 * mag + 2.0 ** -11 * np.abs(exact))    # f16 output rounding


# ---- under a 256 KiB binding limit (read at backend creation: a subprocess) -------------------------
# operands over it by the ratios WebGPU's default 4 MiB met with 16x the bytes: the same blocks, 1/16 the time
LIMITED = r"""
import sys
import numpy as np, scellis_jupyter as sc
from scellis_jupyter import ops
wg = sc.device("wgpu")
assert wg.impl.binding_limit == 256 * 2**10
r = np.random.default_rng(3)
f = lambda *s: r.standard_normal(s).astype(np.float32)
out = {}
for name, a, w in (("m_blocks", f(750, 100), f(100, 50)), ("k_blocks", f(2, 68_750), f(68_750, 3))):
    b, res = f(w.shape[1]), f(a.shape[0], w.shape[1])
    out[name] = (ops.relu(sc.tensor(a, device=wg) @ sc.tensor(w, device=wg) + sc.tensor(b, device=wg))
                 + sc.tensor(res, device=wg)).numpy()
    out[name + "_in"] = np.concatenate([a.ravel(), w.ravel(), b, res.ravel()])
np.savez(sys.argv[1], **out)
"""


def test_chunked_matmuls_under_a_lowered_binding_limit(tmp_path):
    """M blocks carry the epilogue (each block's inputs at its own origin); K blocks, added onto C, run
    the chain apart after the last block."""
    script = tmp_path / "limited.py"
    script.write_text(LIMITED)
    env = dict(os.environ, SCELLIS_MAX_BINDING_BYTES=str(256 * 2**10), SCELLIS_DEVICE="wgpu")
    root = os.path.dirname(os.path.dirname(sc.__file__))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    res = subprocess.run([sys.executable, str(script), str(tmp_path / "o.npz")], env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    got = np.load(tmp_path / "o.npz")
    for name, (m, k, n) in (("m_blocks", (750, 100, 50)), ("k_blocks", (2, 68_750, 3))):
        flat = got[name + "_in"]
        a, w = flat[:m * k].reshape(m, k), flat[m * k:m * k + k * n].reshape(k, n)
        b, r = flat[m * k + k * n:m * k + k * n + n], flat[m * k + k * n + n:].reshape(m, n)
        _check(got[name], a, w, b, r, CHAINS["bias_relu_residual"][1], "f32")
