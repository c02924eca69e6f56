"""The wgpu matmul reading A and/or B transposed (trans_a / trans_b: a folded permute) vs float64 numpy.

Every tile variant is forced (SCELLIS_MATMUL_TUNE=<variant>) for A^T B, A B^T and A^T B^T on odd shapes
(M, N, K off the tile sizes, 1, 17, 130), batched and broadcast, f32 and f16; then the K-split and the
binding-limit chunking with transposed operands. Tolerances as tests/backends/wgpu/test_matmul.py: f32
within 1e-4 of the sqrt(K)-scaled magnitude sqrt(sum_k a^2 b^2) of each dot product; f16 within 1e-3 of
|exact| plus 1e-3 of that magnitude, against float64 products of the f16-rounded inputs.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.graph.opset import make
from scellis_jupyter.tensor import Tensor

from fixtures.devices import WG, needs_wgpu, ran

pytestmark = needs_wgpu
R = np.random.default_rng(11)


def _exact(a, b):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return np.matmul(a64, b64), np.sqrt(np.matmul(a64 * a64, b64 * b64))


def check(got, a, b, dtype="f32"):
    """`got` against a @ b (a, b: the logical operands, already transposed)."""
    exact, mag = _exact(a, b)
    assert got.shape == exact.shape
    if dtype == "f32":
        tol = 1e-4 * mag + 1e-30
    else:
        tol = 1e-3 * np.abs(exact) + 1e-3 * mag + 1e-7
    err = np.abs(got.astype(np.float64) - exact)
    assert np.all(err <= tol), float((err / np.maximum(tol, 1e-30)).max())


def _fresh(monkeypatch, tune):
    monkeypatch.setenv("SCELLIS_MATMUL_TUNE", tune)
    WG.impl.flush()
    WG.impl._records.clear()
    WG.impl._prog_params.clear()


def mm_t(a, b, ta, tb, dtype="f32"):
    """matmul of the stored a, b with the flags set on the graph node (no permute anywhere)."""
    xa, xb = sc.tensor(a, device=WG), sc.tensor(b, device=WG)
    if dtype == "f16":
        xa, xb = xa.to("f16"), xb.to("f16")
    attrs = {k: True for k, on in (("trans_a", ta), ("trans_b", tb)) if on}
    return Tensor._from_node(make("matmul", [xa.node, xb.node], **attrs), WG).numpy()


def sw(x):
    return np.swapaxes(x, -1, -2)


def operands(m, k, n, ta, tb, batch_a=(), batch_b=(), dtype=np.float32):
    """Stored operands for the logical a [.., m, k] @ b [.., k, n], and the logical ones."""
    a = R.standard_normal(batch_a + ((k, m) if ta else (m, k))).astype(dtype)
    b = R.standard_normal(batch_b + ((n, k) if tb else (k, n))).astype(dtype)
    return a, b, (sw(a) if ta else a), (sw(b) if tb else b)


from scellis_jupyter.backends.wgpu.kernels.matmul_tune import VARIANTS  # noqa: E402

MODES = [(True, False), (False, True), (True, True)]
CASES = [(129, 257, 65, (), ()), (1, 1, 1, (), ()), (17, 130, 33, (3,), ()), (5, 7, 4, (2, 1), (3,)),
         (130, 17, 131, (), (2,))]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_variant_reads_transposed_operands(variant, monkeypatch):
    _fresh(monkeypatch, variant)
    for ta, tb in MODES:
        for m, k, n, ba, bb in CASES:
            a, b, la, lb = operands(m, k, n, ta, tb, ba, bb)
            check(mm_t(a, b, ta, tb), la, lb)
            if WG.impl.has_f16:
                a16, b16 = a.astype(np.float16), b.astype(np.float16)
                check(mm_t(a16, b16, ta, tb, "f16"), la.astype(np.float16), lb.astype(np.float16), "f16")
        key = f"matmul:{variant}:f32" + ("+ta" if ta else "") + ("+tb" if tb else "")
        assert ran(key)                   # the forced tile really ran transposed


@pytest.mark.parametrize("variant", ["big_pf", "mid", "small", "huge_pf"])
def test_packed_f16_reads_transposed_operands(variant, monkeypatch):
    """Tier fast: vec4<f16> partials of at most BK products; the bound of test_matmul_packed_f16.py
    (u |exact| + gamma_{BK+1} sum |a b| + 1e-6 sum |a b|, u = 2^-11) on float64 products of the f16 inputs."""
    if not WG.impl.has_f16:
        pytest.skip("adapter lacks shader-f16")
    _fresh(monkeypatch, variant)
    u, nb = 2.0 ** -11, VARIANTS[variant][4] + 1
    with sc.tier("fast"):
        for ta, tb in MODES:
            for m, k, n, ba, bb in CASES[:3]:
                a, b, la, lb = operands(m, k, n, ta, tb, ba, bb, np.float16)
                got = mm_t(a, b, ta, tb, "f16")
                a64, b64 = la.astype(np.float64), lb.astype(np.float64)
                exact, absum = a64 @ b64, np.abs(a64) @ np.abs(b64)
                tol = u * np.abs(exact) + nb * u / (1 - nb * u) * absum + 1e-6 * absum + 1e-7
                assert np.all(np.abs(got.astype(np.float64) - exact) <= tol)
    assert ran(f"matmul:{variant}:f16+h16+ta+tb")


def test_folded_transpose_runs_the_transposed_kernel_and_matches_the_copy(monkeypatch):
    """x.T @ y through the tensor API: the permute folds (no permute dispatch) and the product equals the
    one of an explicit contiguous copy within the f32 bound."""
    _fresh(monkeypatch, "off")
    a, b = R.standard_normal((70, 90)).astype(np.float32), R.standard_normal((50, 70)).astype(np.float32)
    xa, xb = sc.tensor(a, device=WG), sc.tensor(b, device=WG)
    before = WG.impl.dispatches
    got = (xa.transpose() @ xb.transpose()).numpy()
    assert WG.impl.dispatches - before == 1
    check(got, a.T, b.T)
    assert any(k.removesuffix("+roab").endswith("+ta+tb") for k in WG.impl._pipelines)


@pytest.mark.parametrize("config", ["mid:4", "big:2"])
def test_ksplit_with_transposed_operands(config, monkeypatch):
    _fresh(monkeypatch, config)
    with sc.tier("prod"):
        for ta, tb in MODES:
            a, b, la, lb = operands(70, 1030, 90, ta, tb)
            before = WG.impl.dispatches
            r1 = mm_t(a, b, ta, tb)
            assert WG.impl.dispatches - before == 2          # the partial products, then their sum
            check(r1, la, lb)
            assert np.array_equal(r1, mm_t(a, b, ta, tb))


def test_bad_flags_and_shapes_are_clear_errors():
    xa, xb = sc.tensor(np.ones((3, 4), np.float32)), sc.tensor(np.ones((3, 5), np.float32))
    with pytest.raises(sc.ScellisError) as e:
        make("matmul", [xa.node, xb.node], trans_a="yes")
    assert "trans_a" in e.value.diagnostic.message and e.value.diagnostic.where == "op 'matmul'"
    with pytest.raises(sc.ScellisError) as e:
        make("matmul", [xa.node, xb.node], trans_b=True)
    assert "(3, 4) @ (3, 5)^T" in e.value.diagnostic.message
    assert make("matmul", [xa.node, xb.node], trans_a=True).shape == (4, 5)


SPLIT = r"""
import sys
import numpy as np, scellis_jupyter as sc
from scellis_jupyter.graph.opset import make
from scellis_jupyter.tensor import Tensor
wg = sc.device("wgpu")
assert wg.impl.binding_limit == 256 * 2**10, wg.impl.binding_limit
r = np.random.default_rng(5)
out = {}
for name, (sa, sb, ta, tb) in {"square_t": ((384, 384), (384, 384), True, True),
                               "tall_ta": ((100, 750), (100, 50), True, False),
                               "wide_tb": ((2, 1), (68_750, 1), False, True)}.items():
    a, b = r.standard_normal(sa).astype(np.float32), r.standard_normal(sb).astype(np.float32)
    xa, xb = sc.tensor(a, device=wg), sc.tensor(b, device=wg)
    attrs = {k: True for k, on in (("trans_a", ta), ("trans_b", tb)) if on}
    out[name] = Tensor._from_node(make("matmul", [xa.node, xb.node], **attrs), wg).numpy()
    out[name + "_a"], out[name + "_b"] = a, b
out["dispatches"] = np.array(wg.impl.dispatches)
np.savez(sys.argv[1], **out)
"""


def test_chunked_under_a_lowered_binding_limit_with_transposed_operands(tmp_path):
    """A 256 KiB binding limit (SCELLIS_MAX_BINDING_BYTES) and operands over it by the ratios the 4 MiB
    limit of WebGPU's defaults met with 1536^2 / 400x3000 / 1.1M-row operands, 1/16 of the bytes (and of
    the llvmpipe time)."""
    script = tmp_path / "split_t.py"
    script.write_text(SPLIT)
    env = dict(os.environ, SCELLIS_MAX_BINDING_BYTES=str(256 * 2**10), SCELLIS_DEVICE="wgpu")
    root = os.path.dirname(os.path.dirname(sc.__file__))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    res = subprocess.run([sys.executable, str(script), str(tmp_path / "s.npz")], env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    got = np.load(tmp_path / "s.npz")
    assert int(got["dispatches"]) > 6                 # really chunked
    for name, ta, tb in [("square_t", True, True), ("tall_ta", True, False), ("wide_tb", False, True)]:
        a, b = got[name + "_a"], got[name + "_b"]
        check(got[name], sw(a) if ta else a, sw(b) if tb else b)
