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
