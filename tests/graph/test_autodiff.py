"""Autodiff behaviour against PyTorch in float64: accumulation, shared subexpressions, partial grads, an MLP.

Tolerance: float64, rtol=1e-9, atol=1e-10.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import scellis_jupyter as sc
from scellis_jupyter import ops

RTOL, ATOL = 1e-9, 1e-10


@pytest.fixture
def rng():
    return np.random.default_rng(20240607)


def pair(ref, a, grad=True):
    return (sc.tensor(a, dtype="f64", device=ref, requires_grad=grad),
            torch.tensor(a, dtype=torch.float64, requires_grad=grad))


def close(x, t):
    np.testing.assert_allclose(x.numpy(), t.detach().numpy(), rtol=RTOL, atol=ATOL)


def test_accumulation_over_two_backwards(ref, rng):
    a, b = rng.standard_normal((4, 5)), rng.standard_normal((5,))
    x, tx = pair(ref, a)
    w, tw = pair(ref, b)
    (x * w).tanh().sum().backward()
    (tx * tw).tanh().sum().backward()
    close(x.grad, tx.grad)
    ((x @ w) ** 2.0).mean().backward()          # a different graph: gradients add to the first ones
    ((tx @ tw) ** 2.0).mean().backward()
    close(x.grad, tx.grad)
    close(w.grad, tw.grad)
    first = (1.0 - np.tanh(a * b) ** 2) * b
    assert not np.allclose(x.grad.numpy(), first)  # really accumulated, not overwritten
    x.grad = None
    (x * 3.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full((4, 5), 3.0))


def test_backward_same_graph_twice(ref, rng):
    a = rng.standard_normal((3, 7))
    x, tx = pair(ref, a)
    y, ty = ops.softmax(x * x, -1)[:, 1:5].sum(), torch.softmax(tx * tx, -1)[:, 1:5].sum()
    y.backward()
    y.backward()
    ty.backward(retain_graph=True)
    ty.backward()
    close(x.grad, tx.grad)


def test_shared_subexpressions(ref, rng):
    a = rng.standard_normal((3, 4))

    def f(x, lib):
        y = x * x                          # y used four times, x used three times
        z = y + y * x - lib.sin(y) / (y + 1.0)
        return (z * z.exp().mean() + y.sum(0, **{"keepdims" if lib is ops else "keepdim": True}) * x).sum()

    x, tx = pair(ref, a)
    out, tout = f(x, ops), f(tx, torch)
    close(out, tout)
    out.backward()
    tout.backward()
    close(x.grad, tx.grad)


def test_leaf_without_grad(ref, rng):
    a, b, c = rng.standard_normal((5, 3)), rng.standard_normal((3, 2)), rng.standard_normal((2,))
    x, tx = pair(ref, a)
    w, tw = pair(ref, b, grad=False)
    bias, tb = pair(ref, c)
    ((x @ w + bias).relu() ** 2.0).sum().backward()
    ((tx @ tw + tb).relu() ** 2.0).sum().backward()
    assert w.grad is None and tw.grad is None
    close(x.grad, tx.grad)
    close(bias.grad, tb.grad)


def test_unused_leaf_and_unreachable_paths(ref, rng):
    a = rng.standard_normal((4,))
    x, tx = pair(ref, a)
    u, _ = pair(ref, a + 1.0)             # requires grad but is not in the graph
    idx = sc.tensor(np.array([0, 2, 2]), device=ref)
    (ops.index_select(x * 2.0, 0, idx) * (x[:3] > 0.0).to("f64")).sum().backward()
    (torch.index_select(tx * 2.0, 0, torch.tensor([0, 2, 2])) * (tx[:3] > 0.0).to(torch.float64)).sum().backward()
    close(x.grad, tx.grad)                 # the comparison branch contributes nothing, like torch
    assert u.grad is None


def test_backward_through_realized_intermediate(ref, rng):
    """A realized node keeps its inputs: backward after .numpy() of an intermediate still reaches the leaf."""
    a = rng.standard_normal((3, 3))
    x, tx = pair(ref, a)
    h, th = (x @ x).tanh(), (tx @ tx).tanh()
    close(h, th)                           # realizes h
    (h * h.sum(0)).sum().backward()
    (th * th.sum(0)).sum().backward()
    close(x.grad, tx.grad)


def test_detach_stops_gradient(ref, rng):
    a = rng.standard_normal((6,))
    x, tx = pair(ref, a)
    (x * x.detach() + x.detach().exp()).sum().backward()
    (tx * tx.detach() + tx.detach().exp()).sum().backward()
    close(x.grad, tx.grad)


def test_explicit_upstream_gradient(ref, rng):
    a, g = rng.standard_normal((2, 5)), rng.standard_normal((2, 5))
    x, tx = pair(ref, a)
    ops.sigmoid(x).backward(sc.tensor(g, dtype="f64", device=ref))
    torch.sigmoid(tx).backward(torch.tensor(g))
    close(x.grad, tx.grad)


def test_two_layer_mlp_cross_entropy(ref, rng):
    """A 2-layer MLP, cross-entropy via log_softmax + gather, mean over the batch, vs torch's cross_entropy."""
    n, d, h, c = 13, 7, 11, 5
    xs = rng.standard_normal((n, d))
    labels = rng.integers(0, c, size=n)
    params = {"w1": rng.standard_normal((h, d)) / np.sqrt(d), "b1": rng.standard_normal(h) * 0.1,
              "w2": rng.standard_normal((c, h)) / np.sqrt(h), "b2": rng.standard_normal(c) * 0.1}
    P = {k: sc.tensor(v, dtype="f64", device=ref, requires_grad=True) for k, v in params.items()}
    TP = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}

    x = sc.tensor(xs, dtype="f64", device=ref)
    y = sc.tensor(labels.reshape(n, 1), device=ref)
    hid = ops.gelu(ops.linear(x, P["w1"], P["b1"]))
    logp = ops.log_softmax(ops.linear(hid, P["w2"], P["b2"]), -1)
    loss = -ops.gather(logp, 1, y).mean()

    tx = torch.tensor(xs)
    tlogits = TF.linear(TF.gelu(TF.linear(tx, TP["w1"], TP["b1"])), TP["w2"], TP["b2"])
    tloss = TF.cross_entropy(tlogits, torch.tensor(labels))

    close(loss, tloss)
    loss.backward()
    tloss.backward()
    for k in P:
        close(P[k].grad, TP[k].grad)

    # one SGD step in both, then the losses still agree (gradients are usable, not just close once)
    lr = 0.5
    P2 = {k: sc.tensor(P[k].numpy() - lr * P[k].grad.numpy(), dtype="f64", device=ref) for k in P}
    with torch.no_grad():
        TP2 = {k: TP[k] - lr * TP[k].grad for k in TP}
    hid2 = ops.gelu(ops.linear(x, P2["w1"], P2["b1"]))
    loss2 = -ops.gather(ops.log_softmax(ops.linear(hid2, P2["w2"], P2["b2"]), -1), 1, y).mean()
    tloss2 = TF.cross_entropy(TF.linear(TF.gelu(TF.linear(tx, TP2["w1"], TP2["b1"])), TP2["w2"], TP2["b2"]),
                              torch.tensor(labels))
    close(loss2, tloss2)
    assert loss2.item() < loss.item()


@pytest.mark.parametrize("backend", ["reference", "wgpu"])
def test_stop_gradient_is_torch_detach(backend, rng):
    """F.stop_gradient: the value passes, the gradient does not (torch's .detach()), on both backends."""
    from scellis_jupyter.executor.executor import realize
    from scellis_jupyter.graph import functional as F
    from scellis_jupyter.graph.autodiff import grad
    from scellis_jupyter.tensor import tensor
    try:
        dev = sc.device(backend)
    except sc.ScellisError as e:  # pragma: no cover
        pytest.skip(f"no {backend} device: {e}")
    dtype, tdt = ("f64", torch.float64) if backend == "reference" else ("f32", torch.float32)
    a = rng.standard_normal((3, 4))
    x = tensor(a, dtype=dtype, device=dev).node
    n = F.sqrt(F.sum_(F.mul(x, x), -1, keepdims=True))
    y = F.sum_(F.mul(F.div(x, F.stop_gradient(n)), F.tanh(x)))
    g, = grad([y], [x])
    val, gx = realize([y, g], dev.impl)
    tx = torch.tensor(a, dtype=tdt, requires_grad=True)
    ty = (tx / tx.norm(dim=-1, keepdim=True).detach() * tx.tanh()).sum()
    ty.backward()
    tol = dict(rtol=RTOL, atol=ATOL) if dtype == "f64" else dict(rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(val.numpy(), ty.item(), **tol)
    np.testing.assert_allclose(gx.numpy(), tx.grad.numpy(), **tol)


def test_a_weight_made_cheaply_from_stored_leaves_is_made_again_for_the_backward():
    """QLoRA's decoded weight (and LoRA's W + s B A) is recomputed where the backward needs it instead of
    being held from the forward; an ordinary computed operand is not."""
    from scellis_jupyter.graph import functional as F
    from scellis_jupyter.graph.autodiff import grad
    from scellis_jupyter.graph.node import toposort
    codes = F.placeholder((32 * 16 // 2,), "i8", "codes")
    absmax = F.placeholder((32 * 16 // 64,), "f32", "absmax")
    a, b = F.placeholder((4, 16), "f32", "A"), F.placeholder((32, 4), "f32", "B")
    x = F.placeholder((8, 16), "f32", "x")
    w = F.add(F.nf4_dequant(codes, absmax, (32, 16)), F.mul(F.matmul(b, a), 2.0))
    y = F.linear(x, w)
    gx, ga = grad([F.sum_(y)], [x, a])
    fwd = {n.id for n in toposort([y], cut_realized=False)}
    back = [n for n in toposort([gx, ga], cut_realized=False) if n.op == "nf4_dequant"]
    assert any(n.id not in fwd for n in back)           # a decode of its own, not the forward's
