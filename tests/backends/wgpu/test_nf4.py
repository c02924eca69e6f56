"""nf4_dequant on wgpu vs the numpy reference: bit-exact (a table lookup times an f32 scale), odd sizes.

Also: the op refuses wrong shapes/dtypes with clear errors and asking for its gradient is a GraphError.
"""
import os

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.errors import GraphError, ScellisError
from scellis_jupyter.graph import functional as F
from scellis_jupyter.graph.autodiff import grad
from scellis_jupyter.graph.quantize import dequantize, quantize

from fixtures.devices import WG

REF = sc.device("reference")


def _run(dev, q, block):
    c = sc.tensor(q.codes, dtype="i8", device=dev).node
    a = sc.tensor(q.absmax, device=dev).node
    return sc.Tensor(F.nf4_dequant(c, a, q.shape, block), dev).numpy()


@pytest.mark.skipif(WG is None and not os.environ.get("CI"), reason="no wgpu adapter")
@pytest.mark.parametrize("shape,block", [((1,), 64), ((3,), 2), ((5, 7), 64), ((33, 65), 64), ((129,), 3),
                                         ((1001, 3), 64)])
def test_wgpu_matches_reference_bit_exact(shape, block):
    w = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    q = quantize(w, "nf4", block)
    g, r = _run(WG, q, block), _run(REF, q, block)
    assert g.dtype == r.dtype == np.float32 and g.shape == shape
    assert np.array_equal(g.view(np.uint32), r.view(np.uint32))
    assert np.array_equal(r, dequantize(q))


def test_shape_and_dtype_errors_and_no_gradient():
    q = quantize(np.ones((4, 4), np.float32), "nf4")
    c = sc.tensor(q.codes, dtype="i8", device=REF).node
    a = sc.tensor(q.absmax, device=REF).node
    with pytest.raises(ScellisError, match="expected codes"):
        F.nf4_dequant(c, a, (5, 4))
    with pytest.raises(ScellisError, match="i8"):
        F.nf4_dequant(a, a, (4, 4))
    w = F.nf4_dequant(c, a, (4, 4))
    with pytest.raises(GraphError, match="no gradient"):
        grad([F.sum_(w)], [c])
