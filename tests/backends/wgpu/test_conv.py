"""conv2d / pooling (unfold + fold kernels) on wgpu vs the reference path, forward and backward."""
import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter import ops

WG, REF = sc.device("wgpu"), sc.device("reference")
R = np.random.default_rng(4)

CASES = {
    "conv": (lambda x, w: ops.conv2d(x, w, stride=(2, 1), padding=1, dilation=(1, 2)), [(2, 3, 7, 9), (4, 3, 3, 2)]),
    "conv-groups": (lambda x, w: ops.conv2d(x, w, groups=2), [(1, 4, 5, 5), (6, 2, 3, 3)]),
    "maxpool": (lambda x: ops.max_pool2d(x, 3, 2, 1), [(2, 2, 7, 7)]),
    "avgpool": (lambda x: ops.avg_pool2d(x, 2), [(1, 3, 6, 6)]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_forward_backward_match_reference(name):
    f, shapes = CASES[name]
    arrs = [R.standard_normal(s).astype(np.float32) for s in shapes]
    res = []
    for dev in (WG, REF):
        xs = [sc.tensor(a, device=dev, requires_grad=True) for a in arrs]
        out = f(*xs)
        (out * out).sum().backward()
        res.append([out.numpy()] + [x.grad.numpy() for x in xs])
    for a, b in zip(*res):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)  # f32, different summation order


UNFOLD_CASES = [((1, 1, 5, 5), (3, 3), (1, 1), (0, 0), (1, 1)), ((2, 3, 7, 9), (3, 2), (2, 1), (1, 2), (1, 2)),
                ((1, 2, 4, 1), (2, 1), (1, 1), (1, 0), (1, 1)), ((3, 1, 11, 13), (5, 3), (3, 2), (2, 1), (2, 1))]


@pytest.mark.parametrize("shape,k,s,p,d", UNFOLD_CASES)
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_unfold_fold_direct(shape, k, s, p, d, dtype):
    """unfold is a gather (exact); fold sums in f32 in a fixed order: f32 rtol 1e-6, f16 one ulp (1e-3)."""
    from scellis_jupyter.graph import functional as F
    from scellis_jupyter.graph.opset import make
    npd = np.float16 if dtype == "f16" else np.float32
    x = R.standard_normal(shape).astype(npd)
    res = []
    for dev in (WG, REF):
        u = F.unfold(sc.tensor(x, device=dev).node, k, s, p, d, pad_value=-2.5)
        cols = R.standard_normal(u.shape).astype(npd) if not res else res[0][2]
        f = make("fold", [sc.tensor(cols, device=dev).node], kernel=k, stride=s, padding=p, dilation=d,
                 size=shape[2:])
        res.append((sc.Tensor(u, dev).numpy(), sc.Tensor(f, dev).numpy(), cols))
    (u0, f0, _), (u1, f1, _) = res
    assert u0.dtype == u1.dtype and np.array_equal(u0, u1)
    assert f0.shape == f1.shape
    np.testing.assert_allclose(f0.astype(np.float32), f1.astype(np.float32), rtol=1e-3 if dtype == "f16" else 1e-6,
                               atol=1e-3 if dtype == "f16" else 1e-6)
