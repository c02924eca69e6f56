"""Forward and backward of core ops on the reference backend vs PyTorch CPU in float64 (rtol 1e-9)."""
import numpy as np
import pytest
import torch

import scellis_jupyter as sc
from scellis_jupyter import ops

REF = sc.device("reference")
R = np.random.default_rng(0)


def both(shapes, f_sc, f_t):
    arrs = [R.standard_normal(s) for s in shapes]
    xs = [sc.tensor(a, dtype="f64", device=REF, requires_grad=True) for a in arrs]
    ts = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrs]
    out, tout = f_sc(*xs), f_t(*ts)
    assert out.shape == tuple(tout.shape)
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-9, atol=1e-10)
    if tout.numel() == 0:
        return
    g = R.standard_normal(tout.shape)
    (out * sc.tensor(g, dtype="f64", device=REF)).sum().backward()
    (tout * torch.tensor(g)).sum().backward()
    for x, t in zip(xs, ts):
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-9, atol=1e-10)


CASES = [
    ("add-bcast", [(3, 1, 5), (4, 1)], lambda a, b: a + b, lambda a, b: a + b),
    ("sub", [(7, 13), (13,)], lambda a, b: a - b, lambda a, b: a - b),
    ("mul-div", [(2, 5), (2, 5)], lambda a, b: a * b / (b * b + 1.0), lambda a, b: a * b / (b * b + 1.0)),
    ("exp-log", [(5, 3)], lambda a: (a.exp() + 1.0).log(), lambda a: (a.exp() + 1.0).log()),
    ("tanh-sigmoid", [(11,)], lambda a: a.tanh() * a.sigmoid(), lambda a: a.tanh() * a.sigmoid()),
    ("gelu", [(4, 7)], lambda a: ops.gelu(a), lambda a: torch.nn.functional.gelu(a)),
    ("gelu-tanh", [(4, 7)], lambda a: ops.gelu(a, "tanh"), lambda a: torch.nn.functional.gelu(a, approximate="tanh")),
    ("silu", [(13,)], lambda a: ops.silu(a), lambda a: torch.nn.functional.silu(a)),
    ("relu-abs", [(6, 2)], lambda a: a.relu() + abs(a), lambda a: a.relu() + a.abs()),
    ("sqrt-rsqrt", [(5,)], lambda a: (a * a + 1.0).sqrt() + ops.rsqrt(a * a + 2.0),
     lambda a: (a * a + 1.0).sqrt() + torch.rsqrt(a * a + 2.0)),
    ("pow", [(3, 4)], lambda a: (a * a + 0.5) ** 1.7, lambda a: (a * a + 0.5) ** 1.7),
    ("clamp", [(9,)], lambda a: a.clamp(-0.5, 0.7), lambda a: a.clamp(-0.5, 0.7)),
    ("where", [(4, 5), (4, 5)], lambda a, b: ops.where(a > b, a, b * 2.0), lambda a, b: torch.where(a > b, a, b * 2.0)),
    ("sum-axes", [(3, 4, 5)], lambda a: a.sum((0, 2), keepdims=True), lambda a: a.sum((0, 2), keepdim=True)),
    ("mean", [(3, 4, 5)], lambda a: a.mean(1), lambda a: a.mean(1)),
    ("max", [(6, 7)], lambda a: a.max(0), lambda a: a.amax(0)),
    ("var", [(5, 8)], lambda a: a.var(1), lambda a: a.var(1)),
    ("matmul-batched", [(2, 1, 5, 7), (3, 7, 4)], lambda a, b: a @ b, lambda a, b: a @ b),
    ("matmul-1d", [(7,), (7, 3)], lambda a, b: a @ b, lambda a, b: a @ b),
    ("matmul-zero", [(0, 3), (3, 4)], lambda a, b: a @ b, lambda a, b: a @ b),
    ("transpose-reshape", [(2, 3, 5)], lambda a: a.transpose(0, 2).reshape(5, -1),
     lambda a: a.transpose(0, 2).reshape(5, -1)),
    ("slice", [(7, 9)], lambda a: a[1:6:2, ::3], lambda a: a[1:6:2, ::3]),
    ("index-none-ellipsis", [(3, 4, 5)], lambda a: a[..., 2][None, 1], lambda a: a[..., 2][None, 1]),
    ("concat", [(2, 3), (4, 3)], lambda a, b: ops.concat([a, b], 0), lambda a, b: torch.cat([a, b], 0)),
    ("softmax", [(4, 11)], lambda a: ops.softmax(a, -1), lambda a: torch.softmax(a, -1)),
    ("log_softmax-axis0", [(5, 3)], lambda a: ops.log_softmax(a, 0), lambda a: torch.log_softmax(a, 0)),
    ("layer_norm", [(3, 8), (8,), (8,)], lambda x, w, b: ops.layer_norm(x, 8, w, b),
     lambda x, w, b: torch.nn.functional.layer_norm(x, (8,), w, b)),
    ("rms_norm", [(3, 8), (8,)], lambda x, w: ops.rms_norm(x, 8, w, eps=1e-6),
     lambda x, w: torch.nn.functional.rms_norm(x, (8,), w, eps=1e-6)),
    ("conv2d", [(2, 4, 7, 6), (6, 2, 3, 2), (6,)],
     lambda x, w, b: ops.conv2d(x, w, b, stride=(2, 1), padding=1, dilation=1, groups=2),
     lambda x, w, b: torch.nn.functional.conv2d(x, w, b, stride=(2, 1), padding=1, groups=2)),
    ("max_pool2d", [(2, 3, 7, 7)], lambda x: ops.max_pool2d(x, 3, 2, 1),
     lambda x: torch.nn.functional.max_pool2d(x, 3, 2, 1)),
    ("avg_pool2d", [(2, 3, 6, 6)], lambda x: ops.avg_pool2d(x, 2), lambda x: torch.nn.functional.avg_pool2d(x, 2)),
    ("attention-causal", [(2, 5, 4), (2, 7, 4), (2, 7, 3)], lambda q, k, v: ops.attention(q, k, v, causal=True),
     lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
         q, k, v, attn_mask=torch.ones(5, 7, dtype=torch.bool).tril(2))),
    ("attention", [(1, 2, 6, 8), (1, 2, 6, 8), (1, 2, 6, 8)], lambda q, k, v: ops.attention(q, k, v),
     lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v)),
]


@pytest.mark.parametrize("name,shapes,f_sc,f_t", CASES, ids=[c[0] for c in CASES])
def test_op_matches_torch(name, shapes, f_sc, f_t):
    both(shapes, f_sc, f_t)


def test_gather_scatter_embedding():
    table = R.standard_normal((6, 4))
    idx = np.array([3, 0, 3, 5])
    t = sc.tensor(table, dtype="f64", device=REF, requires_grad=True)
    tt = torch.tensor(table, requires_grad=True)
    out = ops.embedding(t, sc.tensor(idx, device=REF))
    tout = torch.nn.functional.embedding(torch.tensor(idx), tt)
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy())
    g = R.standard_normal(tout.shape)
    (out * sc.tensor(g, dtype="f64", device=REF)).sum().backward()
    (tout * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), rtol=1e-12)


def test_errors_name_op_and_shapes():
    a = sc.tensor(np.ones((2, 3)), device=REF)
    with pytest.raises(sc.ScellisError, match=r"matmul.*\(2, 3\) @ \(2, 3\)"):
        a @ a
    with pytest.raises(sc.ScellisError, match=r"cannot be broadcast"):
        a + sc.tensor(np.ones((4,)), device=REF)
    with pytest.raises(sc.ScellisError, match=r"reshape"):
        a.reshape(4, 2)
    with pytest.raises(sc.ScellisError, match=r"scalar"):
        sc.tensor(np.ones(3), device=REF, requires_grad=True).exp().backward()
