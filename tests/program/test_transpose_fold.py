"""Transpose folding (program/transpose_fold.py): a last-two-axes permute read only by matmuls becomes
their trans flag. Checked: the permute steps go, results equal the unfolded program bit for bit on the
reference path and within the f32 matmul bound on wgpu (1e-4 of the sqrt(K)-scaled magnitude, taken
here as 1e-4 of max |value| times sqrt(K) per output, K <= 64), permutes that are outputs or have other
readers stay, the switch turns it off, and a small transformer trained through sc.train on wgpu gives the
same losses with the rewrite on and off (rtol 1e-4: f32 roundoff of different gradient forms over a few
AdamW steps).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.executor.executor import execute
from scellis_jupyter.graph import autodiff
from scellis_jupyter.graph import functional as F
from scellis_jupyter.program import transpose_fold
from scellis_jupyter.program.schedule import compile_program

from fixtures import spec_text
from fixtures.devices import WG, needs_wgpu

REF = sc.device("reference")
R = np.random.default_rng(3)


def _graph(dev, seed=3):
    """A two-layer MLP's loss and gradients plus a batched q k^T product, built with folding on."""
    r = np.random.default_rng(seed)
    t = lambda *s: sc.tensor(r.standard_normal(s).astype(np.float32) * 0.3, device=dev).node
    x, w1, w2, q, k = t(33, 17), t(40, 17), t(7, 40), t(3, 9, 5), t(3, 11, 5)
    h = F.gelu(F.linear(x, w1))
    s = F.matmul(q, F.transpose(k))                       # [3, 9, 11]
    loss = F.add(F.sum_(F.mul(F.linear(h, w2), F.linear(h, w2))), F.sum_(F.mul(s, s)))
    grads = autodiff.grad([loss], [w1, w2, x, q, k])
    return [loss] + grads


def _compile_run(outs, dev, fold: bool, monkeypatch):
    monkeypatch.setenv("SCELLIS_FOLD_TRANSPOSE", "1" if fold else "0")
    prog, leaves = compile_program(outs, dev.backend, "debug")
    got = execute(prog, [l.storage for l in leaves], dev.impl)
    return prog, [dev.impl.to_numpy(s) for s in got]


def _ops(prog, op):
    return [prog.values[s] for s in prog.steps if prog.values[s].op == op]


def test_fold_removes_permutes_and_is_bitwise_on_reference(monkeypatch):
    monkeypatch.setenv("SCELLIS_FOLD_TRANSPOSE", "1")
    outs = _graph(REF)
    off, want = _compile_run(outs, REF, False, monkeypatch)
    on, got = _compile_run(outs, REF, True, monkeypatch)
    swaps_off = [v for v in _ops(off, "permute") if transpose_fold.is_swap(v)]
    assert swaps_off and not [v for v in _ops(on, "permute") if transpose_fold.is_swap(v)]
    assert len(on.steps) == len(off.steps) - len(swaps_off)
    flags = [(v.attrs.get("trans_a", False), v.attrs.get("trans_b", False)) for v in _ops(on, "matmul")]
    assert (True, False) in flags and (False, True) in flags
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@needs_wgpu
def test_fold_on_wgpu_matches_unfolded_and_reference(monkeypatch):
    monkeypatch.setenv("SCELLIS_FOLD_TRANSPOSE", "1")
    outs = _graph(WG)
    _, want = _compile_run(outs, WG, False, monkeypatch)
    on, got = _compile_run(outs, WG, True, monkeypatch)
    assert any(v.attrs for v in _ops(on, "matmul"))
    _, ref = _compile_run(_graph(REF), REF, True, monkeypatch)
    for g, w, r in zip(got, want, ref):
        tol = 1e-4 * np.sqrt(64) * max(float(np.abs(r).max()), 1e-30)
        assert np.abs(g.astype(np.float64) - w).max() <= tol
        assert np.abs(g.astype(np.float64) - r).max() <= tol


def test_outputs_and_other_readers_keep_their_permute(monkeypatch):
    monkeypatch.setenv("SCELLIS_FOLD_TRANSPOSE", "1")
    a = sc.tensor(R.standard_normal((6, 4)).astype(np.float32), device=REF).node
    b = sc.tensor(R.standard_normal((6, 5)).astype(np.float32), device=REF).node
    at = F.transpose(a)
    prog, _ = compile_program([F.matmul(at, b), at], "reference", "debug")        # at is an output
    assert len(_ops(prog, "permute")) == 1
    prog, _ = compile_program([F.add(F.sum_(F.matmul(at, b)), F.sum_(F.exp(at)))], "reference", "debug")
    assert len(_ops(prog, "permute")) == 1                                          # exp reads it too
    c = sc.tensor(R.standard_normal((3, 3, 4)).astype(np.float32), device=REF).node
    prog, _ = compile_program([F.matmul(F.permute(c, (1, 0, 2)), F.transpose(c))], "reference", "debug")
    assert [v.attrs["perm"] for v in _ops(prog, "permute")] == [(1, 0, 2)]         # a batch permute stays
    (mm,) = _ops(prog, "matmul")
    assert mm.attrs == {"trans_b": True}


@pytest.mark.parametrize("env", ["SCELLIS_FOLD_TRANSPOSE", "SCELLIS_FUSION"])
def test_switch_off(env, monkeypatch):
    monkeypatch.setenv(env, "0")
    a = sc.tensor(np.ones((4, 5), np.float32), device=REF).node
    prog, _ = compile_program([F.matmul(F.transpose(a), a)], "reference", "debug")
    assert [prog.values[s].op for s in prog.steps] == ["permute", "matmul"]
    monkeypatch.setenv(env, "1")
    prog, _ = compile_program([F.matmul(F.transpose(a), a)], "reference", "debug")
    assert [prog.values[s].op for s in prog.steps] == ["matmul"]


def _small_gpt(dim=48, seq=32, batch=4) -> str:
    spec = (Path(__file__).resolve().parents[2] / "benchmarks" / "specs" / "plan_only" / "gpt_bench.toml").read_text()
    return (spec.replace("dim = 384", f"dim = {dim}").replace("seq_len = 256", f"seq_len = {seq}")
            .replace("max_len = 256", f"max_len = {seq}").replace("batch_size = 64", f"batch_size = {batch}"))


def test_gpt_step_loses_every_foldable_transpose(monkeypatch):
    """The GPT bench step at small shapes: fewer steps with folding, and no foldable permute left."""
    from scellis_jupyter.run.run import Run
    counts = {}
    for fold in ("0", "1"):
        monkeypatch.setenv("SCELLIS_FOLD_TRANSPOSE", fold)
        prog = Run(_small_gpt(), device=REF, steps=1, tier="debug").step_prog.program
        counts[fold] = (len(prog.steps), len(_ops(prog, "permute")))
        users = {}
        for s in prog.steps:
            for i in prog.values[s].inputs:
                users.setdefault(i, []).append(prog.values[s].op)
        left = [s for s in prog.steps if transpose_fold.is_swap(prog.values[s])
                and set(users.get(s, [])) == {"matmul"} and s not in prog.outputs]
        assert not left if fold == "1" else left
    assert counts["1"][0] < counts["0"][0] and counts["1"][1] < counts["0"][1]


TINY = spec_text("tiny_lm")


@needs_wgpu
def test_training_on_wgpu_gives_the_same_losses_with_the_rewrite_off(monkeypatch, tmp_path):
    losses = {}
    for fold in ("1", "0"):
        monkeypatch.setenv("SCELLIS_FOLD_TRANSPOSE", fold)
        run = sc.train(TINY, store=tmp_path / fold, device="wgpu", progress=False)
        losses[fold] = np.array(run.loss_history, np.float64)
        prog = run.step_prog.program
        assert any(prog.values[s].attrs.get("trans_a") for s in prog.steps) == (fold == "1")
    assert len(losses["1"]) == 4 and np.all(np.isfinite(losses["1"]))
    np.testing.assert_allclose(losses["1"], losses["0"], rtol=1e-4)
