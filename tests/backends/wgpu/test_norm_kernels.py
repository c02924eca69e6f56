"""layer_norm / rms_norm as one kernel (kernels/norm.wgsl) on wgpu, with and without subgroups, against
float64 numpy, and their gradients (the autodiff rule) against torch on the CPU in float64.

Shapes cover 1-element rows, rows not a multiple of 4 / 8 / 32 / 256, a last workgroup with fewer rows
than it takes (37 rows, 8 a workgroup), rows of 1024 (a subgroup a row, vec4) and 1028 / 5000 / 70 000
(a workgroup a row), two normalized axes, and inputs with a mean far from 0 (Welford keeps the variance).
Tolerances (f32 against float64): rtol 1e-5, atol 1e-5 scaled by |w| + |b| of the output (an f32 sum
in another order); f16 storage: rtol 2e-3, atol 2e-3 of the output scale; gradients: rtol/atol 1e-4.
"""
import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.graph import functional as F

from fixtures.devices import WG, needs_wgpu

pytestmark = needs_wgpu
REF = sc.device("reference")
R = np.random.default_rng(91)

SHAPES = [((6, 1), 1), ((5, 7), 1), ((3, 1023), 1), ((4, 1024), 1), ((3, 1028), 1), ((2, 5000), 1),
          ((37, 256), 1), ((9, 36), 1), ((1, 70000), 1), ((2, 3, 4, 5), 2), ((4, 3, 12), 2)]


def reference(x, k, op, w=None, b=None, eps=1e-5):
    x = x.astype(np.float64)
    axes = tuple(range(x.ndim - k, x.ndim))
    if op == "layer_norm":
        d = x - x.mean(axis=axes, keepdims=True)
        y = d / np.sqrt((d * d).mean(axis=axes, keepdims=True) + eps)
    else:
        y = x / np.sqrt((x * x).mean(axis=axes, keepdims=True) + eps)
    if w is not None:
        y = y * w.astype(np.float64)
    if b is not None:
        y = y + b.astype(np.float64)
    return y


def build(op, xn, k, wn, bn, eps=1e-5):
    norm = xn.shape[len(xn.shape) - k:]
    if op == "layer_norm":
        return F.layer_norm(xn, norm, wn, bn, eps)
    return F.rms_norm(xn, norm, wn, eps)


@pytest.mark.parametrize("shape,k", SHAPES, ids=[f"{s}-{k}" for s, k in SHAPES])
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("affine", ["none", "w", "wb"])
def test_norm_matches_float64(path, shape, k, op, affine):
    if op == "rms_norm" and affine == "wb":
        pytest.skip("rms_norm has no bias")
    x = (R.standard_normal(shape) * 2 + 5).astype(np.float32)
    norm = shape[len(shape) - k:]
    w = R.standard_normal(norm).astype(np.float32) if affine != "none" else None
    b = R.standard_normal(norm).astype(np.float32) if affine == "wb" else None
    node = build(op, sc.tensor(x, device=WG).node, k, None if w is None else sc.tensor(w, device=WG).node,
                 None if b is None else sc.tensor(b, device=WG).node)
    assert node.op == op                    # the one-kernel primitive, not the composite
    got = sc.Tensor(node, WG).numpy()
    want = reference(x, k, op, w, b)
    scale = (np.abs(w).max() if w is not None else 1.0) + (np.abs(b).max() if b is not None else 0.0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * scale)
    used = [key for key in WG.impl._pipelines if key.startswith("norm:")]
    assert any(f"SG={path}" in key for key in used)


@pytest.mark.parametrize("shape", [(5, 1024), (3, 1030), (40, 64)])
def test_norm_f16(path, shape):
    x = R.standard_normal(shape).astype(np.float16)
    w = R.standard_normal(shape[-1]).astype(np.float16)
    t = [sc.tensor(a, device=WG).to("f16") for a in (x, w)]
    got = sc.Tensor(F.layer_norm(t[0].node, shape[-1], t[1].node), WG).numpy()
    assert got.dtype == np.float16
    scale = float(np.abs(w).max())
    np.testing.assert_allclose(got.astype(np.float64), reference(x, 1, "layer_norm", w), rtol=2e-3,
                               atol=2e-3 * scale)


def test_norm_bits_repeat(path):
    x = R.standard_normal((33, 3000)).astype(np.float32)

    def once():
        return sc.Tensor(F.layer_norm(sc.tensor(x, device=WG).node, 3000), WG).numpy()
    assert np.array_equal(once(), once())


def test_norm_composite_when_weight_broadcasts():
    """A weight that only broadcasts to the normalized shape keeps the composite (same meaning)."""
    x = sc.tensor(R.standard_normal((3, 8)).astype(np.float32), device=REF)
    w = sc.tensor(R.standard_normal((1,)).astype(np.float32), device=REF)
    assert F.layer_norm(x.node, 8, w.node).op != "layer_norm"


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("dev", ["wgpu", "reference"])
def test_norm_gradients_match_torch(op, dev):
    torch = pytest.importorskip("torch")
    device = WG if dev == "wgpu" else REF
    shape = (6, 40)
    x = (R.standard_normal(shape) + 1).astype(np.float32)
    w = R.standard_normal(shape[-1]).astype(np.float32)
    b = R.standard_normal(shape[-1]).astype(np.float32)
    g = R.standard_normal(shape).astype(np.float32)
    tx, tw, tb = (sc.tensor(a, device=device, requires_grad=True) for a in (x, w, b))
    tg = sc.tensor(g, device=device)
    if op == "layer_norm":
        y = sc.Tensor(F.layer_norm(tx.node, 40, tw.node, tb.node), device)
    else:
        y = sc.Tensor(F.rms_norm(tx.node, 40, tw.node, 1e-6), device)
    (y * tg).sum().backward()
    px, pw, pb = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, w, b))
    if op == "layer_norm":
        py = torch.nn.functional.layer_norm(px, (40,), pw, pb)
    else:
        py = torch.nn.functional.rms_norm(px, (40,), pw, 1e-6)
    (py * torch.tensor(g, dtype=torch.float64)).sum().backward()
    np.testing.assert_allclose(y.numpy(), py.detach().numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tx.grad.numpy(), px.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tw.grad.numpy(), pw.grad.numpy(), rtol=1e-4, atol=1e-4)
    if op == "layer_norm":
        np.testing.assert_allclose(tb.grad.numpy(), pb.grad.numpy(), rtol=1e-4, atol=1e-4)
