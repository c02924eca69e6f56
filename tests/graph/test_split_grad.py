"""Gradient sums of unslices that tile a tensor along one axis (a split: q, k, v of one packed projection)
become one concat (autodiff.merge_unslices); anything else keeps the sum. Values against torch in float64.

Tolerance: rtol 1e-6 / atol 1e-7 on the reference path (float32 arithmetic on O(1) values, a few terms).
"""
import numpy as np
import pytest
import torch

import scellis_jupyter as sc
from scellis_jupyter.graph import autodiff, functional as F
from scellis_jupyter.graph.node import toposort


def _ops(g):
    return [n.op for n in toposort([g], cut_realized=False)]


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_a_split_into_covering_pieces_gets_a_concat_gradient(axis):
    r = np.random.default_rng(axis)
    shape = (6, 9, 12)
    cuts = [0, 2, 3, shape[axis]]
    x = r.standard_normal(shape).astype(np.float32)
    t = sc.tensor(x, device="reference", requires_grad=True)
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    total, want_total = None, None
    for lo, hi in zip(cuts, cuts[1:]):
        key = tuple(slice(lo, hi) if i == axis else slice(None) for i in range(3))
        w = r.standard_normal(x[key].shape).astype(np.float32)
        term = (t[key] * sc.tensor(w, device="reference")).sum()
        tt = (xt[key] * torch.tensor(w, dtype=torch.float64)).sum()
        total = term if total is None else total + term
        want_total = tt if want_total is None else want_total + tt
    (g,) = autodiff.grad([total.node], [t.node])
    ops = _ops(g)
    assert "concat" in ops and "unslice" not in ops, ops
    want_total.backward()
    np.testing.assert_allclose(sc.Tensor(g, sc.device("reference")).numpy(), xt.grad.numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("cuts", [((0, 3), (3, 5)), ((0, 3), (2, 6)), ((0, 6), (0, 6))],
                         ids=["gap", "overlap", "same-piece-twice"])
def test_pieces_that_do_not_tile_keep_the_sum(cuts):
    r = np.random.default_rng(len(cuts))
    x = r.standard_normal((6, 4)).astype(np.float32)
    t = sc.tensor(x, device="reference", requires_grad=True)
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    total, want = None, None
    for lo, hi in cuts:
        w = r.standard_normal((hi - lo, 4)).astype(np.float32)
        term = (t[lo:hi] * sc.tensor(w, device="reference")).sum()
        tt = (xt[lo:hi] * torch.tensor(w, dtype=torch.float64)).sum()
        total = term if total is None else total + term
        want = tt if want is None else want + tt
    (g,) = autodiff.grad([total.node], [t.node])
    assert "concat" not in _ops(g)
    want.backward()
    np.testing.assert_allclose(sc.Tensor(g, sc.device("reference")).numpy(), xt.grad.numpy(), rtol=1e-6, atol=1e-7)
