"""`isfinite` (graph/opset.py PREDICATES): a bool test of a float's bits, against numpy's np.isfinite.

Why its own op: the finiteness test of mixed-precision steps was sum - sum == 0, and wgpu's shader compiler
(llvmpipe here) folded it to true, NaN and inf included, so overflowing steps were never skipped on a GPU.
Checked on both backends, alone and inside a fused elementwise group (after a mul that overflows f16), for
f32 and f16, and as the step's `finite` output through `program.update.all_finite`.
"""
import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.graph import functional as F
from scellis_jupyter.program.update import all_finite

from fixtures.devices import WG, both, needs_wgpu

SPECIAL = np.array([np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0, 1.0, -3.5, 65504.0, 1e-8, 3e38, -3e38],
                   np.float32)


@needs_wgpu
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_isfinite_matches_numpy_on_both_backends(dtype):
    with np.errstate(over="ignore"):            # 3e38 becomes inf in f16, as the cast in the graph makes it
        x = SPECIAL.astype(np.float16) if dtype == "f16" else SPECIAL
    want = np.isfinite(x)
    got, ref = both(lambda n: F.isfinite(F.cast(n, dtype)), SPECIAL)
    assert got.dtype == ref.dtype == np.bool_
    assert np.array_equal(got, want) and np.array_equal(ref, want)
    # fused after a product: 65504 * 2 overflows f16, 3e38 * 2 f32
    with np.errstate(over="ignore"):
        twice = x * x.dtype.type(2)
    got, ref = both(lambda n: F.isfinite(F.mul(F.cast(n, dtype), 2.0)), SPECIAL)
    assert np.array_equal(got, np.isfinite(twice)) and np.array_equal(ref, np.isfinite(twice))


@needs_wgpu
@pytest.mark.parametrize("poison", [None, np.inf, -np.inf, np.nan, "both-infs"])
def test_all_finite_of_gradients_on_both_backends(poison):
    """The guard's flag over several gradients: false when any element is inf or NaN (+inf and -inf in two
    gradients sum to NaN), true otherwise."""
    rng = np.random.default_rng(3)
    grads = [rng.standard_normal(s).astype(np.float32) for s in ((5, 3), (7,), (2, 2, 2))]
    if poison == "both-infs":
        grads[0][1, 1], grads[2][0, 1, 0] = np.inf, -np.inf
    elif poison is not None:
        grads[1][4] = poison
    for dev in (WG, sc.device("reference")):
        nodes = [sc.tensor(g, device=dev).node for g in grads]
        flag = sc.Tensor(all_finite(nodes), dev).numpy()
        assert bool(flag) is (poison is None), (dev, poison)
