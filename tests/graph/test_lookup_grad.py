"""The table gradient of a row lookup (embedding / index_select on axis 0 of a 2-D table): a one-hot matmul
for tables up to autodiff.ONEHOT_ROWS rows, the scatter-add otherwise; both against torch's embedding
backward in float64 (repeated ids, rows no id picks, 2-D ids), on the reference path and on wgpu.

Tolerances: f32 rtol 1e-5 / atol 1e-6 (each output row sums at most ~40 unit normals, in f32); f16 on
wgpu rtol 1e-2 / atol 2e-3 (f16 products of exact ones, f32 accumulation, one f16 rounding of the result).
"""
import numpy as np
import pytest
import torch

import scellis_jupyter as sc
from scellis_jupyter import ops
from scellis_jupyter.graph import autodiff, functional as F
from scellis_jupyter.graph.node import toposort
from fixtures.devices import WG, needs_wgpu

DEVICES = ["reference", pytest.param("wgpu", marks=needs_wgpu)]


def _grad_ops(rows, ids_shape, dim=3):
    table = F.placeholder((rows, dim), "f32", "table")
    ids = F.placeholder(ids_shape, "i32", "ids")
    out = F.embedding(table, ids)
    (g,) = autodiff.grad([out], [table], [F.placeholder(out.shape, "f32", "g")])
    return {n.op for n in toposort([g], cut_realized=False)}


def test_small_tables_take_the_onehot_matmul_and_large_ones_the_scatter(monkeypatch):
    small = _grad_ops(96, (4, 16))
    assert "matmul" in small and "scatter_add" not in small
    monkeypatch.setattr(autodiff, "ONEHOT_ROWS", 95)
    large = _grad_ops(96, (4, 16))
    assert "scatter_add" in large and "matmul" not in large
    monkeypatch.setattr(autodiff, "ONEHOT_ROWS", 4096)
    monkeypatch.setattr(autodiff, "ONEHOT_ELEMS", 96 * 64 - 1)          # the one-hot would hold 96 x 64
    assert "scatter_add" in _grad_ops(96, (4, 16))


def _torch_grad(table, ids, g):
    t = torch.tensor(table, dtype=torch.float64, requires_grad=True)
    torch.nn.functional.embedding(torch.tensor(ids, dtype=torch.long), t).backward(torch.tensor(g, dtype=torch.float64))
    return t.grad.numpy()


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("onehot", [True, False], ids=["onehot", "scatter"])
def test_table_gradient_matches_torch(dev, onehot, monkeypatch):
    if not onehot:
        monkeypatch.setattr(autodiff, "ONEHOT_ROWS", 0)
    r = np.random.default_rng(0)
    rows, dim = 37, 10
    ids = r.integers(0, rows - 5, (6, 40)).astype(np.int32)             # the last 5 rows are never picked
    ids[0, :8] = 3                                                        # and one id repeats a lot
    table = r.standard_normal((rows, dim)).astype(np.float32)
    g = r.standard_normal(ids.shape + (dim,)).astype(np.float32)
    t = sc.tensor(table, device=dev, requires_grad=True)
    ops.embedding(t, sc.tensor(ids, device=dev)).backward(sc.tensor(g, device=dev))
    got = t.grad.numpy() if hasattr(t.grad, "numpy") else sc.Tensor(t.grad, dev).numpy()
    want = _torch_grad(table, ids, g)
    assert np.all(got[-5:] == 0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@needs_wgpu
def test_f16_table_gradient_on_wgpu():
    wg = WG
    if not wg.impl.has_f16:
        pytest.skip("adapter lacks shader-f16")
    r = np.random.default_rng(1)
    ids = r.integers(0, 20, (64,)).astype(np.int32)
    table = r.standard_normal((20, 8)).astype(np.float16)
    g = r.standard_normal((64, 8)).astype(np.float16)
    t = sc.tensor(table, dtype="f16", device=wg, requires_grad=True)
    ops.embedding(t, sc.tensor(ids, device=wg)).backward(sc.tensor(g, dtype="f16", device=wg))
    got = t.grad.numpy() if hasattr(t.grad, "numpy") else sc.Tensor(t.grad, wg).numpy()
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), _torch_grad(table.astype(np.float32), ids, g.astype(np.float32)),
                               rtol=1e-2, atol=2e-3)
