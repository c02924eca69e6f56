"""f16 attention on the matrix units (kernels/attention_scores.py `half`): under tier prod, where the device offers
an f16 subgroup-matrix configuration, the score path's products (S = q k^T, P v, dP = dout v^T, dv = P^T dout,
dq = dS k, dk = dS^T q) take the f16 operands as they are on kernels/matmul_sgm.wgsl, into f32 scores and f32
gradients, P and dS rounded to f16 as operands. Checked through the emulation (SCELLIS_WGPU_SUBGROUP_MATRIX_EMULATE,
as test_matmul_sgm.py) against a dense float64 reference, forward and every gradient, causal (banded products)
and masked with dropout.

Tolerance, relative to each result's largest entry: 3e-3. Inputs are f16-exact; P and dS rounded to f16 (relative
error 2^-11 each), f32 sums over at most 70 keys, outputs rounded to f16: a few 2^-11 in all."""
import re

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter import determinism, ops
from scellis_jupyter.backends.wgpu.kernels import attention
from fixtures.attention import dense, philox_keep
from fixtures.devices import WG, needs_wgpu

pytestmark = needs_wgpu


@pytest.fixture
def emu(monkeypatch):
    """Emulated 4x4x4 f16 subgroup matrices on 8-invocation subgroups (small fragments: test_matmul_sgm.py says
    why); recorded programs and scratch forgotten before and after."""
    if not WG.impl.has_f16:
        pytest.skip("the adapter lacks shader-f16")
    monkeypatch.setenv("SCELLIS_WGPU_SUBGROUP_MATRIX_EMULATE", "f16:4x4x4:8")
    WG.impl.forget_programs()
    WG.impl._pipelines = {k: p for k, p in WG.impl._pipelines.items() if not k.startswith("matmul")}
    yield WG
    WG.impl.forget_programs()


def _run(q, k, v, g, causal, mask=None, tier="prod", **kw):
    with determinism.tier(tier):
        ts = [sc.tensor(a, dtype="f16", device=WG, requires_grad=True) for a in (q, k, v)]
        m = sc.tensor(mask, device=WG) if mask is not None else None
        o = ops.attention(*ts, causal=causal, mask=m, **kw)
        o.backward(sc.tensor(g, dtype="f16", device=WG))
        return [o.numpy()] + [sc.Tensor(t.grad, WG).numpy() if not hasattr(t.grad, "numpy") else t.grad.numpy()
                              for t in ts]


def _case(seed, batch, lq, lk, d):
    r = np.random.default_rng(seed)
    return [r.standard_normal(batch + s).astype(np.float16).astype(np.float32) for s in ((lq, d), (lk, d), (lk, d),
                                                                                          (lq, d))]


def _products() -> set:
    """The product kernels built since the fixture dropped them (tile names)."""
    return {re.sub(r"c\d+$", "", k.split(":")[1]) for k in WG.impl._pipelines if k.startswith("matmul")}


def _rel(got, want) -> float:
    return float(np.abs(np.asarray(got, np.float64) - want).max() / np.abs(want).max())


def test_causal_forward_and_gradients_on_the_matrix_units(emu):
    """Lengths past the 8-row tiles (banded products skip what causality zeroes), lq < lk."""
    q, k, v, g = _case(1, (2, 3), 37, 45, 16)
    got = _run(q, k, v, g, causal=True)
    assert _products() == {"sgm_small@f164x4x4s8emu"}, _products()     # every product, none on the SIMT tiles
    assert "attention-f32-q" not in WG.impl._scratch                      # no widened operand copies
    for what, x, y in zip(("out", "dq", "dk", "dv"), got, dense(q, k, v, g, True, None, 1 / np.sqrt(16))):
        assert _rel(x, y) < 3e-3, what


def test_causal_on_whole_tiles(emu, monkeypatch):
    """Lengths and head size in whole tiles: the banded products (tiles past the diagonal skipped, k ranges cut at
    it) run on the whole tiles, their band offsets on whole k steps, with lq < lk (offset lk - lq) and lq = lk."""
    monkeypatch.setenv("SCELLIS_WGPU_SUBGROUP_MATRIX_EMULATE", "f16:4x4x4:4")   # whole tiles need small subgroups
    monkeypatch.setenv("SCELLIS_MATMUL_SGM_TILE", "sgm_w_mid")                   # (the rule takes the tile that
    WG.impl.forget_programs()                                                    # spreads best: tiny shapes here)
    for lq, lk in ((32, 64), (64, 64)):
        q, k, v, g = _case(5, (2,), lq, lk, 16)
        got = _run(q, k, v, g, causal=True)
        for what, x, y in zip(("out", "dq", "dk", "dv"), got, dense(q, k, v, g, True, None, 1 / np.sqrt(16))):
            assert _rel(x, y) < 3e-3, (lq, lk, what)
    assert any(p.startswith("sgm_w_mid@") for p in _products()), _products()


def test_masked_with_dropout_on_the_matrix_units(emu):
    """Key-padding mask and attention dropout: the forward's row kernel draws the keep factors and the backward's
    probs kernel draws them again (the project's numpy Philox, word offset + (head * Lq + i) * Lk + j); dropped
    entries carry their bit in P's sign until dS, and P z is rounded to f16 for dv = (P z)^T dout."""
    from scellis_jupyter.rng.generator import Generator
    q, k, v, g = _case(2, (2,), 24, 30, 8)
    mask = np.random.default_rng(3).random((2, 1, 30)) > 0.3
    gen = Generator(17)
    gen.positions["attn"] = 6
    stream = gen.stream("attn")
    got = _run(q, k, v, g, causal=False, mask=mask, dropout=0.25, gen=stream)
    assert _products() == {"sgm_small@f164x4x4s8emu"}, _products()
    z = philox_keep(stream.key, 6, 2, 24, 30, 0.25).reshape(2, 24, 30)
    for what, x, y in zip(("out", "dq", "dk", "dv"), got, dense(q, k, v, g, False, mask, 1 / np.sqrt(8), z)):
        assert _rel(x, y) < 3e-3, what


def test_debug_keeps_the_widened_f32_products(emu):
    """Under debug the matrix units' k order is not the reference's: the products stay the SIMT f32 kernels."""
    q, k, v, g = _case(4, (2,), 20, 20, 8)
    got = _run(q, k, v, g, causal=True, tier="debug")
    assert not any(p.startswith("sgm") for p in _products()), _products()
    assert not attention.on_matrix_units(WG.impl, "f16") or WG.impl.tier != "debug"
    for what, x, y in zip(("out", "dq", "dk", "dv"), got, dense(q, k, v, g, True, None, 1 / np.sqrt(8))):
        assert _rel(x, y) < 3e-3, what


LM = """
name = "tiny-lm-mixed-sgm"
[data]
dataset = "pydoc_topics"
seq_len = 16
split = { train = 1.0 }
[model]
nodes = [
  { op = "embedding", vocab = 96, dim = 32 },
  { op = "positional_embedding", max_len = 16 },
  { op = "transformer_block", heads = 2, causal = true },
  { op = "layer_norm" },
  { op = "linear", out = 96 },
]
[recipe]
optimizer = { name = "adamw", lr = 3e-3 }
batch_size = 4
precision = "mixed-f16"
determinism = "prod"
"""


def test_a_mixed_precision_run_trains_on_the_matrix_units(emu):
    """A whole mixed-f16 training run (tier prod) of a small causal LM: every f16 product of the step (the
    linears' forward and backward, attention's) on the emulated matrix units, its losses those of the same run
    on the reference device within mixed precision's tolerance (rtol 2e-3, as tests/run/test_step_batching.py)."""
    from scellis_jupyter.run.run import Run
    run = Run(LM, device=WG, steps=4)
    losses = [s.loss for s in run]
    built = {k.split(":")[1] for k in run.impl._pipelines if k.startswith("matmul")}     # the run's own backend
    assert built and all(p.startswith("sgm") for p in built), built
    ref = [s.loss for s in Run(LM, device="reference", steps=4)]
    np.testing.assert_allclose(losses, ref, rtol=2e-3)
