"""Every section of the data-driven WGSL tables runs against the numpy reference: each op of
kernels/ops.wgsl on every dtype it is defined for, alone (the strided elementwise kernel) and chained
(the fused kernel), the cast matrix (ops.wgsl casts, cast_i8.wgsl both ways), fills and iota.
Many of these sections are reached by no other kernel test (sign, sin, reciprocal, integer neg,
minimum, lt/ne, casts to bool, i8 -> anything, integer literals in a fused group)."""
import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.backends.wgpu import templates
from scellis_jupyter.graph import functional as F
from scellis_jupyter.graph.opset import make

from fixtures.devices import WG, needs_wgpu

pytestmark = needs_wgpu
REF = sc.device("reference")
R = np.random.default_rng(4)


def both(build, *arrays, dtypes=None):
    out = []
    for dev in (WG, REF):
        nodes = [sc.tensor(a, dtype=d, device=dev).node for a, d in zip(arrays, dtypes or [None] * len(arrays))]
        out.append(sc.Tensor(build(*nodes), dev).numpy())
    return out


def sample(dtype, n=67):
    if dtype == "i32":
        return R.integers(-50, 50, n).astype(np.int32)
    a = (R.standard_normal(n) * 2).astype(np.float32)
    a[:4] = [0.0, -0.0, 1.0, -1.0]
    return a


def close(got, want, dtype):
    if dtype == "i32" or got.dtype == bool:
        assert np.array_equal(got, want)
    else:   # f32 transcendental ULP differences; f16 rounding
        np.testing.assert_allclose(got, want, rtol=2e-3 if dtype == "f16" else 3e-6, atol=1e-6, equal_nan=True)


FLOAT = templates.sections("ops", "float.")
INT = templates.sections("ops", "int.")
BIN = templates.sections("ops", "binary.")
CMP = templates.sections("ops", "compare.")
CASES = ([(op, d) for op in FLOAT for d in ("f32", "f16")] + [(op, "i32") for op in INT]
         + [(op, d) for op in BIN for d in ("f32", "i32") if (op, d) != ("pow", "i32")] + [(op, d) for op in CMP
                                                                                          for d in ("f32", "i32")])


@pytest.mark.parametrize("fused", [False, True], ids=["alone", "fused"])
@pytest.mark.parametrize("op, dtype", CASES, ids=[f"{o}-{d}" for o, d in CASES])
def test_op_matches_reference(op, dtype, fused):
    a = sample(dtype)
    b = sample(dtype)[::-1].copy()
    if op in ("log", "sqrt", "rsqrt"):
        a = np.abs(a) + 0.5
    if op == "div" and dtype == "i32":
        b[b == 0] = 7
        a, b = np.abs(a), np.abs(b)      # numpy floors, WGSL truncates: positive operands agree
    if op == "pow":
        a = np.abs(a) + 0.1
    args = [a] if op in FLOAT + INT else [a, b]

    def build(*xs):
        y = make(op, list(xs))
        if fused:    # a second elementwise op on the result: the two run as one fused kernel
            y = make("mul", [y, F.full((), 1, y.dtype)]) if y.dtype != "bool" else make("eq", [y, y])
        return y
    got, want = both(build, *args, dtypes=[dtype] * len(args))
    close(got, want, dtype)


DTYPES = ["f32", "f16", "i32", "u32", "bool", "i8"]


@pytest.mark.parametrize("src", DTYPES)
@pytest.mark.parametrize("to", DTYPES)
def test_cast_matrix(src, to):
    a = (R.standard_normal(41) * 150).astype(np.float32)
    a[:6] = [0.0, -0.0, 0.7, -0.7, 127.9, -128.9]
    if src != "f32":
        a = {"f16": a.astype(np.float16), "i32": a.astype(np.int32), "u32": np.abs(a).astype(np.uint32),
             "bool": a.astype(bool), "i8": np.clip(a, -128, 127).astype(np.int8)}[src]
    got, want = both(lambda x: F.cast(x, to), a, dtypes=[src])
    assert got.dtype == want.dtype
    if to == "f16" and src in ("f32", "f16"):
        np.testing.assert_array_equal(got, want)
    else:
        assert np.array_equal(got, want), (got[:8], want[:8])


@pytest.mark.parametrize("dtype, value", [("f32", -2.5), ("f16", 0.1), ("i32", -7), ("bool", True)])
def test_fill_and_iota(dtype, value):
    got, want = both(lambda: F.full((5, 3), value, dtype))
    assert got.dtype == want.dtype and np.array_equal(got, want)
    if dtype in ("f32", "i32"):
        got, want = both(lambda: F.arange(300, dtype))
        assert np.array_equal(got, want)


def test_fused_integer_and_bool_literals():
    a = R.integers(-9, 9, 50).astype(np.int32)
    got, want = both(lambda x: make("where", [make("gt", [make("add", [x, F.full((), 3, "i32")]),
                                                           F.full((), 0, "i32")]),
                                               x, F.full((), -1, "i32")]), a)
    assert np.array_equal(got, want)
    got, want = both(lambda x: make("eq", [make("gt", [x, F.full((), 0, "i32")]), F.full((), True, "bool")]), a)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("dtype", ["f32", "i32", "u32", "bool"])
def test_reduce_max_per_type(dtype):
    a = R.integers(0, 300, (6, 40)).astype({"f32": np.float32, "i32": np.int32, "u32": np.uint32, "bool": bool}[dtype])
    if dtype == "i32":
        a -= 150
    got, want = both(lambda x: make("reduce_max", [x], axes=(1,), keepdims=False), a, dtypes=[dtype])
    assert np.array_equal(got, want)
