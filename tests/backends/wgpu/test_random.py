"""Device-side Philox draws are bit-identical to the numpy reference at any offset and shape."""
import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter import ops
from scellis_jupyter.graph import functional as F

WG, REF = sc.device("wgpu"), sc.device("reference")


@pytest.mark.parametrize("shape", [(1,), (5, 7), (0, 3), (1031,)])
@pytest.mark.parametrize("skip", [0, 3, 2**32 - 2])
def test_bits_and_uniform_identical(shape, skip):
    got, want = [], []
    for dev, acc in ((WG, got), (REF, want)):
        g = sc.rng.Generator(11)
        g.positions["dropout"] = skip
        s = g.stream("dropout")
        acc.append(sc.Tensor(F.bits_node(s, shape), dev).numpy())
        acc.append(sc.Tensor(F.uniform_node(s, shape), dev).numpy())
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
def test_direct_nodes_odd_offsets(shape, offset, mul64):
    from scellis_jupyter.graph.opset import make
    key = (0x12345678, 0x9ABCDEF0)
    for op in ("philox_bits", "philox_uniform"):
        outs = [sc.Tensor(make(op, [], shape=shape, key=key, offset=offset), d).numpy() for d in (WG, REF)]
        assert outs[0].dtype == outs[1].dtype and np.array_equal(outs[0], outs[1])


def test_public_generator_uniform_identical():
    a = sc.ops.uniform((5, 7), sc.rng.Generator(3), device=sc.device("wgpu")).numpy()
    b = sc.ops.uniform((5, 7), sc.rng.Generator(3), device=sc.device("reference")).numpy()
    assert a.dtype == b.dtype == np.float32 and np.array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("shape", [(3,), (13, 7), (1031,)])
@pytest.mark.parametrize("offset,base", [(0, 1), (3, 2), (5, 2**32 - 3), (2**32 - 1, 6), (7, 2**40 + 1)])
def test_step_base_input_adds_to_the_offset(shape, offset, base, mul64):
    """A step's stream start arrives as an input: offset + base must equal the attr-only draw."""
    from scellis_jupyter.graph.opset import make
    from scellis_jupyter.rng.generator import base_words
    key = (0x0BADF00D, 0x12345)
    for op in ("philox_bits", "philox_uniform"):
        want = sc.Tensor(make(op, [], shape=shape, key=key, offset=offset + base), REF).numpy()
        for d in (WG, REF):
            b = sc.tensor(base_words(base), dtype="u32", device=d).node
            got = sc.Tensor(make(op, [b], shape=shape, key=key, offset=offset), d).numpy()
            assert got.dtype == want.dtype and np.array_equal(got, want), (d.backend, op)


def test_step_generator_draws_fresh_words_each_step_from_one_program():
    """The same compiled dropout, fed the advanced stream position, gives the host stream's next words."""
    from scellis_jupyter.graph.draws import StepGenerator
    from scellis_jupyter.rng.generator import base_words
    from scellis_jupyter.program.schedule import compile_program
    from scellis_jupyter.executor.executor import execute
    sg = StepGenerator(9)
    node = F.uniform_node(sg.stream("dropout"), (4, 5))
    host = sc.rng.Generator(9).stream("dropout")
    for d in (WG, REF):
        prog, leaves = compile_program([node], d.backend, "debug")
        host = sc.rng.Generator(9).stream("dropout")
        for step in range(3):
            base = d.impl.from_numpy(base_words(step * sg.positions["dropout"]), "u32")
            (out,) = execute(prog, [base], d.impl)
            np.testing.assert_array_equal(d.impl.to_numpy(out), host.uniform((4, 5)))


INT64_OFF = r"""
import numpy as np, scellis_jupyter as sc
from scellis_jupyter.graph.opset import make
wg, ref = sc.device("wgpu"), sc.device("reference")
assert "shader-int64" not in wg.impl.features and not wg.impl.int64, wg.impl.features
key = (0x9E3779B9, 0xFFFFFFFF)
for off in (0, 2**32 - 1, 2**62 + 5):
    a, b = (sc.Tensor(make("philox_bits", [], shape=(1031,), key=key, offset=off), d).numpy() for d in (wg, ref))
    assert np.array_equal(a, b), off
assert all(":i64=False" in k for k in wg.impl._pipelines if k.startswith("philox")), list(wg.impl._pipelines)
print("INT64-OFF-OK")
"""


def test_int64_off_by_environment(run_python):
    """SCELLIS_WGPU_INT64=off opens the device without `shader-int64`: the draws take the 32-bit path and still
    give the reference's words."""
    r = run_python(INT64_OFF, SCELLIS_WGPU_INT64="off", SCELLIS_DEVICE="wgpu")
    assert "INT64-OFF-OK" in r.stdout, r.stdout[-2000:] + r.stderr[-3000:]
