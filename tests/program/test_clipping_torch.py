"""Gradient clipping against torch.nn.utils.clip_grad_norm_ and clip_grad_value_.

`clip_grads` (the piece every training step uses) runs in float64 on the reference backend on gradients
of several shapes and is compared with torch's in-place clipping of the same float64 gradients (rtol
1e-12): the norm clip both active and inactive (total norm above / below the limit), the value clip with
some elements clamped and some not, and both together in the order the step applies them (norm first).
Then the whole training step with `clip_grad_norm` / `clip_grad_value` in the recipe (f32, SGD lr = 1, so
the update is the clipped gradient) against the same MLP in torch float64: rtol 1e-4, atol 2e-6, as the
PEFT step tests (the gradient comes back as old - new in f32).
"""
from __future__ import annotations

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.executor.executor import execute
from scellis_jupyter.graph import functional as F
from scellis_jupyter.program.schedule import compile_program
from scellis_jupyter.program.training import build_train_step, clip_grads
from scellis_jupyter.executor import run_numpy

from fixtures import spec_text

torch = pytest.importorskip("torch")

SHAPES = [(7, 5), (5,), (3, 7), (3,)]


def ours(grads, norm=None, value=None, impl=None):
    phs = [F.placeholder(g.shape, "f64", f"g{i}") for i, g in enumerate(grads)]
    out = clip_grads(phs, norm, value)
    prog, leaves = compile_program(out, "reference", "debug")
    by = {id(p): g for p, g in zip(phs, grads)}
    res = execute(prog, [impl.from_numpy(by[id(ln)], "f64") for ln in leaves], impl)
    return [impl.to_numpy(r) for r in res]


def theirs(grads, norm=None, value=None):
    ts = [torch.zeros(g.shape, dtype=torch.float64, requires_grad=True) for g in grads]
    for t, g in zip(ts, grads):
        t.grad = torch.tensor(g, dtype=torch.float64)
    total = torch.nn.utils.clip_grad_norm_(ts, norm) if norm else None
    if value:
        torch.nn.utils.clip_grad_value_(ts, value)
    return [t.grad.numpy() for t in ts], total


def grads(seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) * scale for s in SHAPES]


@pytest.mark.parametrize("norm,value,scale", [
    (1.0, None, 1.0),      # total norm ~ 8: scaled down to 1
    (100.0, None, 1.0),    # below the limit: unchanged
    (None, 0.5, 1.0),      # clamp to [-0.5, 0.5]
    (2.0, 0.1, 1.0),       # norm first, then value
    (1e-3, None, 1e-9),    # tiny gradients: torch's 1e-6 in the denominator matters
])
def test_clip_grads_matches_torch_float64(norm, value, scale, ref):
    g = grads(scale=scale)
    got = ours(g, norm, value, ref.impl)
    want, total = theirs(g, norm, value)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-300)
    if norm and total.item() > norm:
        assert not np.allclose(got[0], g[0])          # the clip did something
    if norm == 100.0:
        assert all(np.array_equal(a, b) for a, b in zip(got, g))
    if value:
        flat = np.concatenate([a.ravel() for a in got])
        assert np.abs(flat).max() <= value and (np.abs(flat) < value).any()


MLP = spec_text("clip_mlp")


@pytest.mark.parametrize("clip", ["clip_grad_norm = 0.3", "clip_grad_value = 0.02"])
def test_training_step_clips_like_torch(clip, ref):
    spec = sc.Spec.from_text(MLP + clip + "\n")
    step = build_train_step(spec, 6, "reference", "debug")
    rng = np.random.default_rng(1)
    fd = {}
    for leaf in step.leaves:
        n = leaf.node
        if leaf.role == "parameter":
            fd[leaf.name] = (rng.standard_normal(n.shape) * 0.3).astype(np.float32)
        elif leaf.name in ("lr", "step"):
            fd[leaf.name] = np.float32(1.0)
        elif leaf.name == "y":
            fd[leaf.name] = rng.integers(0, 10, n.shape)
        else:
            fd[leaf.name] = rng.random(n.shape).astype(np.float32)
    res = run_numpy(step, fd, ref.impl)
    t = {k: torch.tensor(fd[k].astype(np.float64), requires_grad=True) for k in fd if "linear" in k}
    h = torch.tanh(torch.tensor(fd["x"], dtype=torch.float64) @ t["0.linear.weight"].T + t["0.linear.bias"])
    logits = h @ t["2.linear.weight"].T + t["2.linear.bias"]
    loss = torch.nn.functional.cross_entropy(logits, torch.tensor(fd["y"], dtype=torch.long))
    loss.backward()
    ps = list(t.values())
    raw = np.concatenate([p.grad.numpy().ravel() for p in ps])
    if "norm" in clip:
        assert np.linalg.norm(raw) > 0.3                          # active
        torch.nn.utils.clip_grad_norm_(ps, 0.3)
    else:
        assert (np.abs(raw) > 0.02).any() and (np.abs(raw) < 0.02).any()
        torch.nn.utils.clip_grad_value_(ps, 0.02)
    np.testing.assert_allclose(res["loss"], loss.item(), rtol=1e-5)
    for k, p in t.items():
        got = fd[k].astype(np.float64) - res[f"param:{k}"].astype(np.float64)
        np.testing.assert_allclose(got, p.grad.numpy(), rtol=1e-4, atol=2e-6, err_msg=k)
