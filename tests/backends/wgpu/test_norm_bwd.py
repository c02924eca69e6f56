"""layer_norm_bwd / rms_norm_bwd (kernels/norm_bwd.wgsl and the reference kernel) against torch's autograd
in float64 on the CPU: dx, the weight's gradient (g * xhat summed over rows) and the bias's, for rows short
(a subgroup a row), long (a workgroup a row), not a multiple of 4 (scalar bindings), over several rows
of a box, on the subgroup path and the fallback tree; f16 storage; and second derivatives (a gradient of
the gradient), which go through the composite the op stands for. Tolerances: f32 results within 2e-6 of
the largest magnitude (f32 rounding of sums over up to 4096 elements), f16 within 2e-2."""
import numpy as np
import pytest
import torch

import scellis_jupyter as sc
from scellis_jupyter.graph import functional as F
from scellis_jupyter.graph.autodiff import grad
from scellis_jupyter.graph.node import toposort

from fixtures.devices import WG, needs_wgpu

REF = sc.device("reference")
R = np.random.default_rng(53)
CASES = [(op, aff) for op in ("layer_norm", "rms_norm") for aff in ("", "w", "wb") if (op, aff) != ("rms_norm", "wb")]


def _ours(dev, op, aff, x, w, b, gy, dtype="f32"):
    n = x.shape[-1]
    tx, tw, tb, tg = (sc.tensor(a.astype(np.float32), dtype=dtype, device=dev) for a in (x, w, b, gy))
    W = tw.node if "w" in aff else None
    B = tb.node if "b" in aff else None
    y = F.layer_norm(tx.node, n, W, B) if op == "layer_norm" else F.rms_norm(tx.node, n, W, 1e-6)
    wrt = [tx.node] + [t for t in (W, B) if t is not None]
    return [sc.Tensor(g_, dev).numpy().astype(np.float64) for g_ in grad([y], wrt, [tg.node])]


def _torch(op, aff, x, w, b, gy):
    n = x.shape[-1]
    X, Wt, Bt = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    Wt_ = Wt if "w" in aff else None
    if op == "layer_norm":
        y = torch.nn.functional.layer_norm(X, (n,), Wt_, Bt if "b" in aff else None)
    else:
        y = torch.nn.functional.rms_norm(X, (n,), Wt_, 1e-6)
    wrt = [X] + ([Wt] if "w" in aff else []) + ([Bt] if "b" in aff else [])
    return [t.numpy() for t in torch.autograd.grad(y, wrt, torch.tensor(gy))]


def _sample(shape):
    n = shape[-1]
    return (R.standard_normal(shape) * 3 + 1, R.standard_normal(n), R.standard_normal(n), R.standard_normal(shape))


def _check(got, want, tol):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert np.abs(a - b).max() <= tol * np.abs(b).max(), (np.abs(a - b).max(), np.abs(b).max())


@pytest.mark.parametrize("op,aff", CASES)
def test_reference_backward_matches_torch(op, aff):
    x, w, b, gy = _sample((3, 5, 24))
    _check(_ours(REF, op, aff, x, w, b, gy), _torch(op, aff, x, w, b, gy), 2e-6)


@needs_wgpu
@pytest.mark.parametrize("n", [6, 384, 1000, 4096])
@pytest.mark.parametrize("op,aff", CASES)
def test_wgpu_backward_matches_torch(path, op, aff, n):
    x, w, b, gy = _sample((37, n))
    WG.impl._pipelines.clear()
    _check(_ours(WG, op, aff, x, w, b, gy), _torch(op, aff, x, w, b, gy), 2e-6)
    used = [k for k in WG.impl._pipelines if k.startswith("norm_bwd")]
    assert used and all(f"SG={path}" in k for k in used)
    assert all(f"VEC={n % 4 == 0}" in k for k in used) and all(f"WGROW={n > 512}" in k for k in used)


@needs_wgpu
def test_f16_storage_computes_in_f32():
    x, w, b, gy = _sample((16, 384))
    x16, w16, b16, g16 = (a.astype(np.float16).astype(np.float64) for a in (x, w, b, gy))
    _check(_ours(WG, "layer_norm", "wb", x, w, b, gy, "f16"), _torch("layer_norm", "wb", x16, w16, b16, g16), 2e-2)


def test_one_backward_node_replaces_the_composite():
    """The gradient of a layer_norm is one layer_norm_bwd node (two outputs with a weight), not the
    dozen primitives of the composite."""
    x = sc.tensor(R.standard_normal((4, 8)).astype(np.float32), device=REF)
    w = sc.tensor(R.standard_normal(8).astype(np.float32), device=REF)
    dx, dw = grad([F.sum_(F.layer_norm(x.node, 8, w.node))], [x.node, w.node])
    ops = [n_.op for n_ in toposort([dx, dw])]
    assert ops.count("layer_norm_bwd") == 1 and "rsqrt" not in ops


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_second_derivatives_match_torch(op):
    """d/dx and d/dw of sum(c * dx): a gradient penalty through a norm."""
    x, w, _, gy = _sample((4, 12))
    c = R.standard_normal((4, 12))
    tx, tw, tg, tc = (sc.tensor(a, dtype="f64", device=REF) for a in (x, w, gy, c))
    y = F.layer_norm(tx.node, 12, tw.node) if op == "layer_norm" else F.rms_norm(tx.node, 12, tw.node, 1e-6)
    (dx,) = grad([y], [tx.node], [tg.node])
    got = [sc.Tensor(g_, REF).numpy() for g_ in grad([F.sum_(F.mul(dx, tc.node))], [tx.node, tw.node])]
    X, Wt = (torch.tensor(a, requires_grad=True) for a in (x, w))
    yt = (torch.nn.functional.layer_norm(X, (12,), Wt) if op == "layer_norm"
          else torch.nn.functional.rms_norm(X, (12,), Wt, 1e-6))
    (dxt,) = torch.autograd.grad(yt, [X], torch.tensor(gy), create_graph=True)
    want = torch.autograd.grad((dxt * torch.tensor(c)).sum(), [X, Wt])
    _check(got, [t.numpy() for t in want], 1e-10)


@needs_wgpu
def test_rows_split_under_a_lowered_binding_limit_give_the_same_bits(monkeypatch):
    """Boxes of rows, each binding within the limit, compute each row as the unsplit kernel does (dx the
    same bits; the weight and bias gradients sum over rows, and the split column sums add their pieces in
    another order: within f32 rounding); a single row over the limit is refused by name."""
    x, w, b, gy = _sample((64, 256))
    whole = _ours(WG, "layer_norm", "wb", x, w, b, gy)
    monkeypatch.setattr(WG.impl, "binding_limit", 16384)      # 16 rows of 1 KiB a box
    for reset in (WG.impl._records, WG.impl._prog_params):
        reset.clear()
    WG.impl._pipelines.clear()
    split = _ours(WG, "layer_norm", "wb", x, w, b, gy)
    assert np.array_equal(whole[0], split[0])
    _check(split[1:], whole[1:], 1e-6)
    x, w, b, gy = _sample((4, 8192))                             # one row: 32 KiB
    with pytest.raises(sc.ScellisError, match="layer_norm.*row of 8192 elements exceeds the binding limit"):
        _ours(WG, "layer_norm", "wb", x, w, b, gy)
