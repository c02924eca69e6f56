"""Device-side Philox draws are bit-identical to the numpy reference at any offset and shape."""
import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter import ops

WG, REF = sc.device("wgpu"), sc.device("reference")


@pytest.mark.parametrize("shape", [(1,), (5, 7), (0, 3), (1031,)])
@pytest.mark.parametrize("skip", [0, 3, 2**32 - 2])
def test_bits_and_uniform_identical(shape, skip):
    got, want = [], []
    for dev, acc in ((WG, got), (REF, want)):
        g = sc.rng.Generator(11)
        g.positions["dropout"] = skip
        s = g.stream("dropout")
        acc.append(sc.Tensor(s.bits_node(shape), dev).numpy())
        acc.append(sc.Tensor(s.uniform_node(shape), dev).numpy())
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    # and the host-side stream agrees too
    g = sc.rng.Generator(11)
    g.positions["dropout"] = skip
    assert np.array_equal(got[0].reshape(-1), g.stream("dropout").bits(int(np.prod(shape))))


def test_dropout_masks_identical():
    x = np.ones((9, 13), np.float32)
    outs = [ops.dropout(sc.tensor(x, device=d), 0.3, sc.rng.Generator(5)).numpy() for d in (WG, REF)]
    np.testing.assert_array_equal(outs[0], outs[1])
    assert 0.5 < (outs[0] > 0).mean() < 0.9
