"""16-byte operand loads in the tile matmul (matmul.py `_vec4`, matmul.wgsl fetch_a_t_v4 / fetch_b_v4).

Where B (row-major) or A^T has its rows, its extent along the loaded axis, its element offset and its batch
strides in whole vec4s, each thread's 4 contiguous elements load as one vec4 from a vec4 binding; elsewhere
the scalar loads run. The loads feed the same tiles in the same order, so the product is bit-identical to
the scalar kernel's (SCELLIS_MATMUL_VEC4=off), and both are checked against float64 numpy within the f32
bound of tests/backends/wgpu/test_matmul.py (1e-4 of sqrt(sum_k a^2 b^2) per output).
"""
import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.graph.opset import make
from scellis_jupyter.tensor import Tensor

from fixtures.devices import WG, launch_keys, needs_wgpu, not_again_on_dawn

pytestmark = needs_wgpu
R = np.random.default_rng(29)


def _fresh(monkeypatch, vec4: str, tune: str = "off", arows: str = "off", f16: str = "on"):
    monkeypatch.setenv("SCELLIS_MATMUL_VEC4", vec4)
    monkeypatch.setenv("SCELLIS_MATMUL_VEC4_AROWS", arows)
    monkeypatch.setenv("SCELLIS_MATMUL_VEC4_F16", f16)
    monkeypatch.setenv("SCELLIS_MATMUL_TUNE", tune)
    WG.impl.flush()
    WG.impl._records.clear()
    WG.impl._prog_params.clear()


def _run(a, b, ta, tb):
    """matmul of the stored a, b (flags on the node); f16 arrays stay f16 on the device."""
    xa, xb = sc.tensor(a, device=WG), sc.tensor(b, device=WG)
    if a.dtype == np.float16:
        xa, xb = xa.to("f16"), xb.to("f16")
    attrs = {k: True for k, on in (("trans_a", ta), ("trans_b", tb)) if on}
    return Tensor._from_node(make("matmul", [xa.node, xb.node], **attrs), WG).numpy()


def _on_and_off(monkeypatch, a, b, ta, tb, tier: str, on: dict, off: dict):
    """(product with the `on` settings of _fresh, the same with `off`, the matmul launch keys of the first, every
    launch key of the second)."""
    with sc.tier(tier):
        keys = launch_keys(monkeypatch)
        _fresh(monkeypatch, **on)
        got = _run(a, b, ta, tb)
        on_keys = keys[:]
        _fresh(monkeypatch, **off)
        del keys[:]
        ref = _run(a, b, ta, tb)
    return got, ref, [k for k in on_keys if k.startswith("matmul:")], keys[:]


CASES = {  # A stored shape, B stored shape, trans_a, trans_b, tile (off: the table), (va, vb)
    "B-rows-of-vec4": ((70, 33), (33, 36), False, False, "off", (False, True)),
    "A^T-and-B": ((45, 68), (45, 132), True, False, "off", (True, True)),
    "A^T-batched": ((3, 40, 20), (3, 40, 12), True, False, "off", (True, True)),
    "B-broadcast-batch": ((2, 17, 9), (9, 24), False, False, "off", (False, True)),
    "B^T-stays-scalar": ((70, 33), (36, 33), False, True, "off", (False, False)),
    "N-off-vec4": ((20, 16), (16, 30), False, False, "off", (False, False)),
    "M-off-vec4-A^T": ((16, 30), (16, 8), True, False, "off", (False, True)),
    "every-tile-big": ((130, 70), (70, 260), False, False, "big_db", (False, True)),
    "every-tile-tall": ((70, 132), (70, 68), True, False, "tall_pf", (True, True)),
    "k-split": ((4100, 64), (4100, 72), True, False, "mid_pf:4", (True, True)),
    # row-major A along k (SCELLIS_MATMUL_VEC4_AROWS=on): 4 k of a row, put as 4 components of the k-major tile
    "A-rows-and-B": ((70, 36), (36, 132), False, False, "off", (True, True)),
    "A-rows-B^T": ((45, 68), (30, 68), False, True, "off", (True, False)),
    "A-rows-K-off-vec4": ((70, 33), (33, 36), False, False, "off", (False, True)),
    "A-rows-batched": ((3, 21, 40), (3, 40, 12), False, False, "off", (True, True)),
    "A-rows-every-tile-big": ((130, 72), (72, 260), False, False, "big_db", (True, True)),
    "A-rows-every-tile-tall-pf": ((131, 68), (68, 68), False, False, "tall_pf", (True, True)),
    "A-rows-every-tile-small": ((33, 20), (20, 36), False, False, "small", (True, True)),
    "A-rows-k-split": ((64, 4100), (4100, 72), False, False, "mid_pf:4", (True, True)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_vec4_loads_give_the_scalar_kernels_bits(name, monkeypatch):
    ash, bsh, ta, tb, tile, want = CASES[name]
    a, b = R.standard_normal(ash).astype(np.float32), R.standard_normal(bsh).astype(np.float32)
    tier = "prod" if ":" in tile else "debug"     # a forced split runs outside debug only
    got, ref, mm, off_keys = _on_and_off(monkeypatch, a, b, ta, tb, tier,
                                         dict(vec4="on", tune=tile, arows="on" if name.startswith("A-rows") else "off"),
                                         dict(vec4="off", tune=tile))
    assert mm and all(("+va" in k, "+vb" in k) == want for k in mm), mm
    assert not any("+va" in k or "+vb" in k for k in off_keys)
    assert np.array_equal(got, ref)
    la, lb = (np.swapaxes(a, -1, -2) if ta else a), (np.swapaxes(b, -1, -2) if tb else b)
    a64, b64 = la.astype(np.float64), lb.astype(np.float64)
    tol = 1e-4 * np.sqrt(np.matmul(a64 * a64, b64 * b64)) + 1e-30
    assert np.all(np.abs(got - np.matmul(a64, b64)) <= tol)


F16 = {  # A stored shape, B stored shape, trans_a, trans_b, tile (off: the table), (va, vb)
    "A^T-and-B": ((45, 68), (45, 132), True, False, "off", (True, True)),
    "A-rows-and-B": ((70, 36), (36, 132), False, False, "off", (True, True)),
    "A-rows-batched": ((3, 21, 40), (3, 40, 12), False, False, "off", (True, True)),
    "N-off-vec4": ((20, 16), (16, 30), False, False, "off", (True, False)),
    "every-tile-big": ((130, 72), (72, 260), False, False, "big", (True, True)),
    "k-split": ((4100, 64), (4100, 72), True, False, "mid:4", (True, True)),
}


@pytest.mark.parametrize("tier", ["prod", "fast"])
@pytest.mark.parametrize("name", list(F16))
def test_f16_operands_load_as_vec4_f16_with_the_scalar_kernels_bits(name, tier, monkeypatch):
    """f16 operands (a row-major A too, by default) bind as vec4<f16> arrays and load 4 elements (8 bytes) at
    once, widened to f32 (prod) or kept f16 for the packed math (fast): the same values into the same tiles, so
    the scalar kernel's bits (SCELLIS_MATMUL_VEC4_F16=off); and within the f16-input bound against float64."""
    if not WG.impl.has_f16:
        pytest.skip("adapter lacks shader-f16")
    ash, bsh, ta, tb, tile, want = F16[name]
    a, b = (R.standard_normal(s).astype(np.float16) for s in (ash, bsh))
    got, ref, mm, off_keys = _on_and_off(monkeypatch, a, b, ta, tb, tier, dict(vec4="on", tune=tile, arows=""),
                                         dict(vec4="on", tune=tile, arows="", f16="off"))
    assert mm and all(("+va" in k, "+vb" in k) == want and ":f16" in k for k in mm), mm
    assert all(("+h16" in k) == (tier == "fast") for k in mm)
    assert not any("+va" in k or "+vb" in k for k in off_keys if k.startswith("matmul:"))
    assert got.dtype == np.float16 and np.array_equal(got, ref)
    la, lb = (np.swapaxes(a, -1, -2) if ta else a), (np.swapaxes(b, -1, -2) if tb else b)
    a64, b64 = la.astype(np.float64), lb.astype(np.float64)
    bound = np.sqrt(np.matmul(a64 * a64, b64 * b64))
    tol = (0.02 if tier == "fast" else 2e-3) * bound + 1e-2 * np.abs(np.matmul(a64, b64)) + 1e-3
    assert np.all(np.abs(got.astype(np.float64) - np.matmul(a64, b64)) <= tol)


def test_the_rule_takes_whole_vec4s_only(monkeypatch):
    """`_vec4` on made-up windows: every condition in its docstring refuses on its own, and an accepted window
    grows to whole vec4s."""
    from scellis_jupyter.backends.storage import Storage
    from scellis_jupyter.backends.wgpu.kernels.matmul import _vec4
    be = WG.impl
    buf = be.scratch("vec4-rule", 4096)

    def wins(size=1000, off=0):
        return [Storage(be, buf, off, (1,), "f32", size), Storage(be, buf, off, (1,), "f32", size)]
    z = [[0, 0, 0]] * 3
    base = dict(offs=(0, 0), lda=8, ldb=8, m=8, n=8, st3=z)

    def vec(ta=True, tb=False, w=None, **kw):
        args = {**base, **kw}
        return _vec4(be, "f32", ta, tb, w or wins(), args["offs"], args["lda"], args["ldb"], args["m"], args["n"],
                     args["st3"], args.get("k", 0), args.get("band", 0))
    va, vb, w = vec()
    assert (va, vb) == (True, True) and [x.nbytes for x in w] == [1008, 1008]
    assert vec(ta=False, tb=True)[:2] == (False, False)              # a row-major A: only when asked for
    monkeypatch.setenv("SCELLIS_MATMUL_VEC4_AROWS", "on")
    assert vec(ta=False, tb=True, k=8)[:2] == (True, False)
    assert vec(ta=False, k=6)[:2] == (False, True) and vec(ta=False, k=0)[:2] == (False, True)
    assert vec(ta=False, k=8, band=3)[:2] == (False, True)             # BAND_KBEG: k may start inside a vec4
    assert vec(ta=False, k=8, band=2)[:2] == (True, True)              # BAND_KEND: masked past kend
    assert vec(ta=False, k=8, lda=6)[:2] == (False, True)
    monkeypatch.delenv("SCELLIS_MATMUL_VEC4_AROWS")
    assert vec(lda=6)[:2] == (False, True) and vec(ldb=6)[:2] == (True, False)
    assert vec(m=6)[:2] == (False, True) and vec(n=10)[:2] == (True, False)
    assert vec(offs=(2, 4))[:2] == (False, True) and vec(offs=(4, 1))[:2] == (True, False)
    assert vec(st3=[[0, 0, 6], [0, 0, 8], [0, 0, 0]])[:2] == (False, True)
    assert vec(w=wins(off=32 + 8))[:2] == (False, False)              # a window not on 16 bytes
    monkeypatch.setattr(be, "binding_limit", 1000)
    assert vec()[:2] == (False, False)                                 # 1008 bytes would exceed the binding
    monkeypatch.undo()
    assert _vec4(be, "f16", True, False, wins(), (0, 0), 8, 8, 8, 8, z)[:2] == (True, True)     # f16 too
    assert _vec4(be, "f16", False, False, wins(), (0, 0), 8, 8, 8, 8, z, 8)[:2] == (True, True)  # its A rows too
    monkeypatch.setenv("SCELLIS_MATMUL_VEC4_AROWS", "off")
    assert _vec4(be, "f16", False, False, wins(), (0, 0), 8, 8, 8, 8, z, 8)[:2] == (False, True)
    monkeypatch.setenv("SCELLIS_MATMUL_VEC4_F16", "off")
    assert _vec4(be, "f16", True, False, wins(), (0, 0), 8, 8, 8, 8, z)[:2] == (False, False)
    monkeypatch.delenv("SCELLIS_MATMUL_VEC4_F16")
    monkeypatch.delenv("SCELLIS_MATMUL_VEC4_AROWS")
    assert _vec4(be, "i32", True, False, wins(), (0, 0), 8, 8, 8, 8, z)[:2] == (False, False)
    monkeypatch.setenv("SCELLIS_MATMUL_VEC4", "off")
    assert vec()[:2] == (False, False)


@pytest.mark.parametrize("vec4", ["on", pytest.param("off", marks=not_again_on_dawn("the same tuner timing with vec4 on"))])
def test_the_tuner_times_the_kernels_the_launch_runs(vec4, monkeypatch, tmp_path):
    """Autotuning (SCELLIS_MATMUL_TUNE=on, tier prod) times each candidate with the operand loads the launch
    will use: vec4 loads of A^T and B here, scalar ones with SCELLIS_MATMUL_VEC4=off."""
    from scellis_jupyter.backends.wgpu.kernels import matmul as M
    monkeypatch.setenv("SCELLIS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(WG.impl, "_matmul_tuner", None, raising=False)
    _fresh(monkeypatch, vec4, "on")
    timed, inside = [], [False]
    real_pipeline, real_time = WG.impl.pipeline, M._time_config

    def pipeline(key, *a, **kw):
        if inside[0]:
            timed.append(key)
        return real_pipeline(key, *a, **kw)

    def time_config(*a, **kw):
        inside[0] = True
        try:
            return real_time(*a, **kw)
        finally:
            inside[0] = False
    monkeypatch.setattr(WG.impl, "pipeline", pipeline)
    monkeypatch.setattr(M, "_time_config", time_config)
    a, b = R.standard_normal((200, 68)).astype(np.float32), R.standard_normal((200, 132)).astype(np.float32)
    with sc.tier("prod"):
        got = _run(a, b, True, False)
    mm = [k for k in timed if k.startswith("matmul:")]
    assert mm, timed
    assert all(("+va" in k and "+vb" in k) == (vec4 == "on") for k in mm), mm
    np.testing.assert_allclose(got, a.T.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
