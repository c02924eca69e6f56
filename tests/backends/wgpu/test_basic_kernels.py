"""Baseline WGSL kernels (matmul, reductions, softmax, gather, scatter_add) on wgpu vs the reference path."""
import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter import ops

WG, REF = sc.device("wgpu"), sc.device("reference")
R = np.random.default_rng(2)

FNS = {
    "matmul": (lambda a, b: a @ b, [(7, 13), (13, 5)]),
    "matmul-batched": (lambda a, b: a @ b, [(2, 1, 5, 7), (3, 7, 4)]),
    "matmul-zero-k": (lambda a, b: a @ b, [(3, 0), (0, 4)]),
    "sum": (lambda a: a.sum((0, 2)), [(3, 4, 5)]),
    "sum-all": (lambda a: a.sum(), [(17, 3)]),
    "max": (lambda a: a.max(1, keepdims=True), [(6, 11)]),
    "mean-var": (lambda a: a.var(0) + a.mean(), [(9, 4)]),
    "softmax": (lambda a: ops.softmax(a, -1), [(5, 13)]),
    "log_softmax-axis0": (lambda a: ops.log_softmax(a, 0), [(7, 3)]),
    "layer_norm": (lambda a: ops.layer_norm(a, 6), [(4, 6)]),
}


@pytest.mark.parametrize("name", list(FNS))
def test_forward_matches_reference(name):
    f, shapes = FNS[name]
    arrs = [R.standard_normal(s).astype(np.float32) for s in shapes]
    got = f(*[sc.tensor(a, device=WG) for a in arrs]).numpy()
    want = f(*[sc.tensor(a, device=REF) for a in arrs]).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)  # f32, different summation order


def test_mlp_gradients_match_reference():
    x = R.standard_normal((16, 8)).astype(np.float32)
    w = R.standard_normal((4, 8)).astype(np.float32)
    y = R.integers(0, 4, 16)
    grads = []
    for dev in (WG, REF):
        W = sc.tensor(w, device=dev, requires_grad=True)
        logp = ops.log_softmax(ops.linear(ops.relu(sc.tensor(x, device=dev)), W), -1)
        loss = -ops.gather(logp, 1, sc.tensor(y.reshape(-1, 1), device=dev)).mean()
        loss.backward()
        grads.append((loss.item(), W.grad.numpy()))
    assert abs(grads[0][0] - grads[1][0]) < 1e-5
    np.testing.assert_allclose(grads[0][1], grads[1][1], rtol=1e-5, atol=1e-6)


def test_embedding_grad_scatter_add():
    t = R.standard_normal((6, 3)).astype(np.float32)
    idx = np.array([[1, 5, 1, 0]])
    out = []
    for dev in (WG, REF):
        T = sc.tensor(t, device=dev, requires_grad=True)
        (ops.embedding(T, sc.tensor(idx, device=dev)) * 2.0).sum().backward()
        out.append(T.grad.numpy())
    np.testing.assert_array_equal(out[0], out[1])
