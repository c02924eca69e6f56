"""`y.backward()` computes y in the same program as the gradients: y carries the tier it ran under and its
value (checked against numpy in float64) needs no second program."""
import numpy as np

import scellis_jupyter as sc
from scellis_jupyter import determinism


def test_backward_realizes_the_output_with_its_tier(ref):
    a = np.random.default_rng(0).random((4, 3))
    x = sc.tensor(a, device=ref, requires_grad=True)
    y = (x * x).sum()
    assert y.tier is None                                # nothing computed yet (lazy)
    y.backward()
    assert y.tier == determinism.resolve(None)[0]
    assert y.node.realized
    np.testing.assert_allclose(y.item(), float((a * a).sum()), rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), 2 * a, rtol=1e-6)
