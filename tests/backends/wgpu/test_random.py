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


@pytest.mark.parametrize("shape", [(3,), (2, 3, 5), (13, 1), (997,), (0,)])
@pytest.mark.parametrize("offset", [1, 2, 7, 4095, 2**32 - 1, 2**34 + 3, 2**62 + 5])
def test_direct_nodes_odd_offsets(shape, offset):
    from scellis_jupyter.graph.opset import make
    key = (0x12345678, 0x9ABCDEF0)
    for op in ("philox_bits", "philox_uniform"):
        outs = [sc.Tensor(make(op, [], shape=shape, key=key, offset=offset), d).numpy() for d in (WG, REF)]
        assert outs[0].dtype == outs[1].dtype and np.array_equal(outs[0], outs[1])


def test_public_generator_uniform_identical():
    a = sc.rng.Generator(3).uniform((5, 7), device=sc.device("wgpu")).numpy()
    b = sc.rng.Generator(3).uniform((5, 7), device=sc.device("reference")).numpy()
    assert a.dtype == b.dtype == np.float32 and np.array_equal(a.view(np.uint32), b.view(np.uint32))
