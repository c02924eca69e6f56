"""Elementwise fusion: one step per chain, same values as op-by-op on both backends, bounded groups."""
import os

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter import ops
from scellis_jupyter.graph import functional as F
from scellis_jupyter.program import fusion
from scellis_jupyter.program.schedule import compile_program

from fixtures.devices import WG

REF = sc.device("reference")
R = np.random.default_rng(7)

CHAINS = {
    "arith": lambda a, b, c: (a * b + c) / (abs(c) + 1.0) - a,
    "unary": lambda a, b, c: ops.gelu(a * b) + ops.tanh(c) * ops.sigmoid(a) - ops.exp(-abs(b)),
    "bcast": lambda a, b, c: (a + b[0]) * c[:, :1] + 2.0,
    "where-compare": lambda a, b, c: ops.where(a > b, a * c, b - c) + (a <= c).to("f32"),
    "f16-round": lambda a, b, c: ((a * 3.0).to("f16") * b.to("f16")).to("f32") + c,
    "int-cast": lambda a, b, c: (a * 4.0).to("i32").to("f32") + b,
    "wide": lambda a, b, c: sum((a * (i + 1.0) + b * c) for i in range(6)) + a * b * c,
}


def _steps(node):
    prog, _ = compile_program([node], "reference", "debug")
    return [prog.values[s].op for s in prog.steps], prog


def _run(fn, dev, fuse: bool, arrays, monkeypatch):
    monkeypatch.setenv("SCELLIS_FUSION", "1" if fuse else "0")
    ts = [sc.tensor(x, device=dev) for x in arrays]
    return fn(*ts).numpy()


@pytest.mark.parametrize("name", list(CHAINS))
def test_fused_equals_unfused_bitwise_on_reference(name, monkeypatch):
    arrays = [R.standard_normal((9, 17)).astype(np.float32) for _ in range(3)]
    got = _run(CHAINS[name], REF, True, arrays, monkeypatch)
    want = _run(CHAINS[name], REF, False, arrays, monkeypatch)
    np.testing.assert_array_equal(got, want)


@pytest.mark.skipif(WG is None and not os.environ.get("CI"), reason="no wgpu adapter")
@pytest.mark.parametrize("name", list(CHAINS))
def test_fused_on_wgpu_matches_reference(name, monkeypatch):
    arrays = [R.standard_normal((9, 17)).astype(np.float32) for _ in range(3)]
    before = WG.impl.dispatches
    got = _run(CHAINS[name], WG, True, arrays, monkeypatch)
    fused_dispatches = WG.impl.dispatches - before
    unfused = _run(CHAINS[name], WG, False, arrays, monkeypatch)
    want = _run(CHAINS[name], REF, False, arrays, monkeypatch)
    # f32 transcendental ULPs on the GPU vs numpy; a contracted a*b+c (FMA) is within this too
    np.testing.assert_allclose(got, want, rtol=3e-6, atol=3e-6)
    np.testing.assert_allclose(got, unfused, rtol=3e-6, atol=3e-6)
    assert 1 <= fused_dispatches <= 3, fused_dispatches


def test_a_chain_is_one_step_and_inputs_are_external():
    a = sc.tensor(np.ones((4, 5), np.float32), device=REF)
    b = sc.tensor(np.ones(5, np.float32), device=REF)
    ops_, prog = _steps(F.exp(F.add(F.mul(a.node, 2.0), b.node)))
    assert ops_ == ["fused"]
    (v,) = [prog.values[s] for s in prog.steps]
    assert [c[0] for c in v.attrs["code"]] == ["fill", "mul", "add", "exp"]
    assert len(v.inputs) == 2 and prog.arena.arena_bytes == 0   # no intermediates left in the arena


def test_shared_producers_outputs_and_non_elementwise_users_stay_materialized(monkeypatch):
    monkeypatch.setenv("SCELLIS_EPILOGUE", "0")   # the matmul's own epilogue: tests/program/test_epilogue_pass.py
    a = sc.tensor(np.ones((4, 4), np.float32), device=REF)
    h = F.exp(a.node)                         # used by matmul and by an elementwise op
    y = F.add(F.matmul(h, h), F.mul(h, 3.0))
    ops_, prog = _steps(y)
    assert ops_.count("exp") == 1 and "matmul" in ops_
    assert ops_[-1] == "fused"                # mul(h, 3) fused into the final add
    # an output is never absorbed into its consumer
    z = F.neg(a.node)
    prog2, _ = compile_program([z, F.exp(z)], "reference", "debug")
    assert [prog2.values[s].op for s in prog2.steps] == ["neg", "exp"]


def test_groups_respect_the_binding_budget():
    xs = [sc.tensor(np.full(8, float(i), np.float32), device=REF) for i in range(12)]
    y = xs[0].node
    for x in xs[1:]:
        y = F.add(y, x.node)
    ops_, prog = _steps(y)
    assert all(len(prog.values[s].inputs) <= fusion.MAX_INPUTS for s in prog.steps)
    assert len(prog.steps) >= 2
    np.testing.assert_array_equal(sc.Tensor(y, REF).numpy(), np.full(8, float(sum(range(12))), np.float32))


def test_fill_used_by_matmul_is_kept():
    a = sc.tensor(np.ones((3, 3), np.float32), device=REF)
    one = F.full((3, 3), 1.0)
    y = F.add(F.matmul(a.node, one), F.mul(one, 2.0))
    np.testing.assert_array_equal(sc.Tensor(y, REF).numpy(), np.full((3, 3), 5.0, np.float32))


def test_switch_off(monkeypatch):
    monkeypatch.setenv("SCELLIS_FUSION", "0")
    a = sc.tensor(np.ones((4, 5), np.float32), device=REF)
    assert _steps(F.exp(F.mul(a.node, 2.0)))[0] == ["fill", "mul", "exp"]


def _bias_corrected(t, gs):
    """Adam's bias corrections from a step count, read by one update per tensor (as a step has them)."""
    bc1 = F.sub(1.0, F.pow_(0.9, t))
    bc2 = F.sqrt(F.sub(1.0, F.pow_(0.999, t)))
    return [F.div(F.mul(g, bc2), F.add(F.mul(bc1, 0.5), 1e-3)) for g in gs]


def _want_bias_corrected(tv, arrays):
    bc1 = 1.0 - 0.9 ** tv
    bc2 = np.sqrt(1.0 - 0.999 ** tv)
    return [a.astype(np.float64) * bc2 / (bc1 * 0.5 + 1e-3) for a in arrays]


def test_a_scalar_chain_is_recomputed_in_every_kernel_that_reads_it(monkeypatch):
    arrays = [R.standard_normal(s).astype(np.float32) for s in ((5,), (3, 4), (7,))]
    t = sc.tensor(np.float32(3.0), device=REF)
    gs = [sc.tensor(a, device=REF) for a in arrays]
    outs = _bias_corrected(t.node, [g.node for g in gs])
    prog, _ = compile_program(outs, "reference", "debug")
    assert [prog.values[s].op for s in prog.steps] == ["fused"] * 3      # no dispatch for the scalars
    got = [sc.Tensor(o, REF).numpy() for o in outs]
    monkeypatch.setenv("SCELLIS_FUSION", "0")
    t2 = sc.tensor(np.float32(3.0), device=REF)
    unfused = [sc.Tensor(o, REF).numpy() for o in _bias_corrected(t2.node, [sc.tensor(a, device=REF).node
                                                                          for a in arrays])]
    for g, u, w in zip(got, unfused, _want_bias_corrected(3.0, arrays)):
        np.testing.assert_array_equal(g, u)                 # same instructions, same roundings
        np.testing.assert_allclose(g, w, rtol=2e-5)       # 1 - 0.999**t cancels: f32 leaves ~1e-5 relative


@pytest.mark.skipif(WG is None and not os.environ.get("CI"), reason="no wgpu adapter")
def test_scalar_chains_inlined_on_wgpu_match_float64():
    arrays = [R.standard_normal(s).astype(np.float32) for s in ((5,), (3, 4), (7,))]
    t = sc.tensor(np.float32(5.0), device=WG)
    outs = _bias_corrected(t.node, [sc.tensor(a, device=WG).node for a in arrays])
    before = WG.impl.dispatches
    from scellis_jupyter.executor.executor import realize
    realize(outs, WG.impl, "debug")
    got = [sc.Tensor(o, WG).numpy() for o in outs]
    assert WG.impl.dispatches - before == 3
    for g, w in zip(got, _want_bias_corrected(5.0, arrays)):
        # WGSL's pow (exp2 of log2) is a few f32 ULPs off, and 1 - 0.999**t cancels ~8 bits of them
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-7)


def test_casts_of_kept_values_become_groups_for_batching(monkeypatch):
    """lone_casts: casts of leaves or outputs that join nothing become one-instruction groups where at least
    two are cast alike (program/batching.py then runs them as one dispatch); a lone one of its kind stays a
    cast, and without lone_casts (multi-tensor batching off) nothing changes."""
    ws = [sc.tensor(np.full(s, 1.5, np.float32), device=REF) for s in ((4,), (3, 5), (6,))]
    new = [F.mul(w.node, 2.0) for w in ws]                       # "updated" parameters: program outputs
    copies = [F.cast(n, "f16") for n in new]                      # the f16 copies the next step reads
    odd = F.cast(ws[0].node, "i32")                               # the only f32 -> i32 cast of a leaf
    outs = new + copies + [odd]
    prog, _ = compile_program(outs, "reference", "debug")         # lone_casts follows batching (on)
    groups = [prog.values[s] for s in prog.steps if prog.values[s].op == "fused"
              and [c[0] for c in prog.values[s].attrs["code"]] == ["cast"]]
    assert len(groups) == 3 and all(v.dtype == "f16" for v in groups)
    assert sum(prog.values[s].op == "cast" for s in prog.steps) == 1        # the lone f32 -> i32 one
    assert sum("batch" in prog.values[s].attrs for s in prog.steps) >= 3    # the copies run as one batch
    monkeypatch.setenv("SCELLIS_MULTI_TENSOR", "0")
    plain, _ = compile_program(outs, "reference", "debug")
    assert sum(plain.values[s].op == "cast" for s in plain.steps) == 4
    monkeypatch.delenv("SCELLIS_MULTI_TENSOR")
    for c, n in zip(copies, new):       # (evaluating materializes the nodes: last)
        np.testing.assert_array_equal(sc.Tensor(c, REF).numpy(), sc.Tensor(n, REF).numpy().astype(np.float16))
