"""Every op's forward and backward on the reference backend against PyTorch CPU in float64.

Each case builds the same inputs (seeded numpy RNG, one seed per test id) in both frameworks, compares
the forward values, then draws a random upstream gradient g and compares every input's .grad after
`(out * g).sum().backward()`. Shapes include odd, prime and zero-size dimensions and broadcasting.
Default tolerance: float64, rtol=1e-9, atol=1e-10; cases that need another one say so.
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import scellis_jupyter as sc
from scellis_jupyter import ops

RTOL, ATOL = 1e-9, 1e-10


@pytest.fixture
def rng(request):
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


# ---- input makers: a shape tuple means standard-normal f64; these cover the rest -------------------
def pos(*shape, lo=0.1):
    """Positive floats (domains of log, sqrt, rsqrt, pow bases)."""
    return lambda r: np.abs(r.standard_normal(shape)) + lo


def ints(*shape, lo=0, hi=5):
    """An int index array (i32 in the engine, int64 in torch)."""
    return lambda r: r.integers(lo, hi, size=shape)


def bools(*shape, p=0.5):
    return lambda r: r.random(shape) < p


def tied(*shape):
    """Integer-valued floats: many exact ties (comparisons, max, clamp boundaries)."""
    return lambda r: r.integers(-2, 3, size=shape).astype(np.float64)


def const(arr):
    return lambda r: np.asarray(arr)


def make_inputs(rng, spec):
    return [np.asarray(s(rng)) if callable(s) else rng.standard_normal(s) for s in spec]


def to_sc(a, ref):
    if a.dtype == np.bool_:
        return sc.tensor(a, dtype="bool", device=ref)
    if a.dtype.kind in "iu":
        return sc.tensor(a.astype(np.int32), dtype="i32", device=ref)
    return sc.tensor(a, dtype="f64", device=ref, requires_grad=True)


def to_torch(a):
    if a.dtype == np.bool_:
        return torch.tensor(a)
    if a.dtype.kind in "iu":
        return torch.tensor(a.astype(np.int64))
    return torch.tensor(a, dtype=torch.float64, requires_grad=True)


def compare(ref, rng, spec, f_sc, f_t, rtol=RTOL, atol=ATOL, backward=True):
    arrs = make_inputs(rng, spec)
    xs = [to_sc(a, ref) for a in arrs]
    ts = [to_torch(a) for a in arrs]
    out, tout = f_sc(*xs), f_t(*ts)
    assert out.shape == tuple(tout.shape), (out.shape, tuple(tout.shape))
    got, want = out.numpy(), tout.detach().numpy()
    if tout.dtype == torch.float64:
        assert out.dtype == "f64", out.dtype
    if want.dtype == np.bool_:
        assert got.dtype == np.bool_
        np.testing.assert_array_equal(got, want)
        return
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    if not backward or not tout.requires_grad:
        return
    g = rng.standard_normal(tout.shape)
    (out * sc.tensor(g, dtype="f64", device=ref)).sum().backward()
    (tout * torch.tensor(g)).sum().backward()
    checked = 0
    for i, (x, t) in enumerate(zip(xs, ts)):
        if not t.is_floating_point():
            continue
        if t.grad is None:
            assert x.grad is None or not np.any(x.grad.numpy()), f"input {i}: torch has no grad"
            continue
        assert x.grad is not None, f"input {i}: no gradient"
        assert x.grad.shape == tuple(t.shape)
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=rtol, atol=atol,
                                   err_msg=f"grad of input {i}")
        checked += 1
    assert checked, "no gradient was compared"


def cases(*rows):
    return pytest.mark.parametrize("spec,f_sc,f_t", [r[1:] for r in rows], ids=[r[0] for r in rows])


# ---- elementwise arithmetic with broadcasting --------------------------------------------------------
BCAST = [((3, 1, 5), (4, 1)), ((7, 13), (13,)), ((), (5,)), ((6,), ()), ((1,), (13, 1)),
         ((0, 3), (1, 3)), ((2, 0, 1), (1, 4)), ((2, 1, 7), (2, 3, 1))]
ARITH = {"add": (lambda a, b: a + b), "sub": (lambda a, b: a - b), "mul": (lambda a, b: a * b),
         "div": (lambda a, b: a / b)}


@pytest.mark.parametrize("shapes", BCAST, ids=[f"{a}-{b}" for a, b in BCAST])
@pytest.mark.parametrize("op", list(ARITH))
def test_arith_broadcast(ref, rng, op, shapes):
    f = ARITH[op]
    compare(ref, rng, shapes, f, f)


@pytest.mark.parametrize("shapes", BCAST[:6], ids=[f"{a}-{b}" for a, b in BCAST[:6]])
def test_pow_tensor_exponent(ref, rng, shapes):
    compare(ref, rng, [pos(*shapes[0], lo=0.2), shapes[1]], lambda a, b: a ** b, lambda a, b: a ** b)


@cases(
    ("scalar-add", [(4, 7)], lambda a: a + 2.5, lambda a: a + 2.5),
    ("scalar-radd", [(4, 7)], lambda a: 2.5 + a, lambda a: 2.5 + a),
    ("scalar-rsub", [(5,)], lambda a: 1.5 - a, lambda a: 1.5 - a),
    ("scalar-rmul", [(3, 0)], lambda a: 3.0 * a, lambda a: 3.0 * a),
    ("scalar-rdiv", [pos(13)], lambda a: 2.0 / a, lambda a: 2.0 / a),
    ("scalar-div", [(2, 3)], lambda a: a / 7.0, lambda a: a / 7.0),
    ("pow-int-exp-neg-base", [(3, 5)], lambda a: a ** 3.0, lambda a: a ** 3.0),
    ("pow-square", [(7,)], lambda a: a ** 2, lambda a: a ** 2),
    ("pow-frac", [pos(4, 3)], lambda a: a ** 1.7, lambda a: a ** 1.7),
    ("pow-neg-exp", [pos(4, 3)], lambda a: ops.pow(a, -0.5), lambda a: a ** -0.5),
    ("rpow", [(11,)], lambda a: 2.0 ** a, lambda a: 2.0 ** a),
    ("pow-zero-exp-at-zero", [const(np.array([0.0, 0.0, 1.5, -2.0]))], lambda a: a ** 0.0, lambda a: a ** 0.0),
    ("pow-zero-base", [const(np.array([0.0, 0.0, 2.0, 0.5])), const(np.array([0.0, 2.0, 0.0, 3.0]))],
     lambda a, b: a ** b, lambda a, b: a ** b),
    ("neg", [(3, 4)], lambda a: -a, lambda a: -a),
    ("maximum", [(3, 4), (4,)], ops.maximum, torch.maximum),
    ("minimum", [(3, 1), (1, 5)], ops.minimum, torch.minimum),
    ("maximum-ties", [tied(6, 5), tied(6, 5)], ops.maximum, torch.maximum),
    ("minimum-ties", [tied(6, 5), tied(5)], ops.minimum, torch.minimum),
)
def test_elementwise_misc(ref, rng, spec, f_sc, f_t):
    compare(ref, rng, spec, f_sc, f_t)


# ---- comparisons and where ----------------------------------------------------------------------------
CMP = {"lt": (lambda a, b: a < b), "le": (lambda a, b: a <= b), "gt": (lambda a, b: a > b),
       "ge": (lambda a, b: a >= b), "eq": (lambda a, b: a == b), "ne": (lambda a, b: a != b)}


@pytest.mark.parametrize("shapes", [((4, 5), (4, 5)), ((3, 1, 5), (4, 1)), ((0, 2), (2,)), ((), (7,))])
@pytest.mark.parametrize("op", list(CMP))
def test_compare(ref, rng, op, shapes):
    compare(ref, rng, [tied(*shapes[0]), tied(*shapes[1])], CMP[op], CMP[op])


@pytest.mark.parametrize("op", list(CMP))
def test_compare_scalar_and_int(ref, rng, op):
    compare(ref, rng, [tied(5, 3)], lambda a: CMP[op](a, 1.0), lambda a: CMP[op](a, 1.0))
    compare(ref, rng, [ints(5, 3, lo=-2, hi=3), ints(3, lo=-2, hi=3)], CMP[op], CMP[op])


@cases(
    ("same", [bools(4, 5), (4, 5), (4, 5)], ops.where, torch.where),
    ("bcast", [bools(3, 1, 5), (4, 1), (1, 5)], ops.where, torch.where),
    ("cond-bcast", [bools(7), (3, 7), (3, 7)], ops.where, torch.where),
    ("zero-size", [bools(0, 3), (1, 3), (3,)], ops.where, torch.where),
    ("scalar-branch", [bools(4, 6), (4, 6)], lambda c, a: ops.where(c, a, 0.5),
     lambda c, a: torch.where(c, a, 0.5)),
    ("from-compare", [(5, 7), (5, 7)], lambda a, b: ops.where(a > b, a * b, b - a),
     lambda a, b: torch.where(a > b, a * b, b - a)),
)
def test_where(ref, rng, spec, f_sc, f_t):
    compare(ref, rng, spec, f_sc, f_t)


@cases(  # integer data (forward only; i32 in the engine, int64 in torch)
    ("add-mul", [ints(3, 1, 5, lo=-50, hi=50), ints(4, 1, lo=-50, hi=50)], lambda a, b: a * b + a - b,
     lambda a, b: a * b + a - b),
    ("scalar", [ints(7, lo=-9, hi=9)], lambda a: a * 3 - 1, lambda a: a * 3 - 1),
    ("neg-abs", [ints(2, 6, lo=-9, hi=9)], lambda a: -abs(a), lambda a: -abs(a)),
    ("max-min", [ints(5, 4, lo=-9, hi=9), ints(4, lo=-9, hi=9)], ops.maximum, torch.maximum),
    ("sum", [ints(3, 4, 5, lo=-99, hi=99)], lambda a: a.sum((0, 2)), lambda a: a.sum((0, 2))),
    ("reduce-max", [ints(3, 7, lo=-99, hi=99)], lambda a: a.max(1), lambda a: a.amax(1)),
    ("shape", [ints(2, 3, 5, hi=99)], lambda a: a.permute(2, 0, 1)[1:, ::2].reshape(-1),
     lambda a: a.permute(2, 0, 1)[1:, ::2].reshape(-1)),
    ("concat-where", [ints(2, 3, hi=9), ints(1, 3, hi=9)],
     lambda a, b: ops.where(ops.concat([a, b], 0) > 4, ops.concat([a, b], 0), b),
     lambda a, b: torch.where(torch.cat([a, b], 0) > 4, torch.cat([a, b], 0), b)),
)
def test_integer_ops(ref, rng, spec, f_sc, f_t):
    compare(ref, rng, spec, lambda *xs: f_sc(*xs).to("f64"), lambda *ts: f_t(*ts).to(torch.float64),
            backward=False)


# ---- unary --------------------------------------------------------------------------------------------
UNARY = [
    ("exp", None, ops.exp, torch.exp),
    ("log", pos, ops.log, torch.log),
    ("tanh", None, ops.tanh, torch.tanh),
    ("sigmoid", None, ops.sigmoid, torch.sigmoid),
    ("relu", None, ops.relu, torch.relu),
    ("gelu", None, ops.gelu, TF.gelu),
    ("gelu-tanh", None, lambda x: ops.gelu(x, approximate="tanh"), lambda x: TF.gelu(x, approximate="tanh")),
    ("silu", None, ops.silu, TF.silu),
    ("sqrt", pos, ops.sqrt, torch.sqrt),
    ("rsqrt", pos, ops.rsqrt, torch.rsqrt),
    ("abs", None, ops.abs, torch.abs),
    ("sin", None, ops.sin, torch.sin),
    ("cos", None, ops.cos, torch.cos),
    ("neg", None, ops.neg, torch.neg),
    ("reciprocal", pos, ops.reciprocal, torch.reciprocal),
    ("erf", None, ops.erf, torch.erf),
    ("sign", None, lambda x: ops.sign(x) * x, lambda x: torch.sign(x) * x),
    ("m-exp", None, lambda x: x.exp(), lambda x: x.exp()),
    ("m-log", pos, lambda x: x.log(), lambda x: x.log()),
    ("m-tanh", None, lambda x: x.tanh(), lambda x: x.tanh()),
    ("m-sigmoid", None, lambda x: x.sigmoid(), lambda x: x.sigmoid()),
    ("m-relu", None, lambda x: x.relu(), lambda x: x.relu()),
    ("m-sqrt", pos, lambda x: x.sqrt(), lambda x: x.sqrt()),
    ("m-abs", None, lambda x: abs(x), lambda x: abs(x)),
]
USHAPES = [(7, 13), (), (0,), (3, 0, 2), (1, 5, 1)]


@pytest.mark.parametrize("shape", USHAPES, ids=[str(s) for s in USHAPES])
@pytest.mark.parametrize("name,domain,f_sc,f_t", UNARY, ids=[u[0] for u in UNARY])
def test_unary(ref, rng, name, domain, f_sc, f_t, shape):
    spec = [domain(*shape) if domain else shape]
    compare(ref, rng, spec, f_sc, f_t)


def test_unary_large_magnitude(ref, rng):
    """Saturating regions: sigmoid/tanh/gelu/silu at |x| ~ 40 (no overflow, no NaN)."""
    spec = [lambda r: r.standard_normal((5, 9)) * 40.0]
    for f_sc, f_t in [(ops.sigmoid, torch.sigmoid), (ops.tanh, torch.tanh), (ops.gelu, TF.gelu),
                      (ops.silu, TF.silu), (lambda x: ops.gelu(x, "tanh"), lambda x: TF.gelu(x, approximate="tanh"))]:
        compare(ref, rng, spec, f_sc, f_t)


def test_relu_abs_at_zero(ref, rng):
    """Subgradients at exactly 0 match torch (relu' = 0, abs' = sign = 0)."""
    spec = [const(np.array([-1.5, 0.0, 0.0, 2.0, -0.0]))]
    compare(ref, rng, spec, ops.relu, torch.relu)
    compare(ref, rng, spec, ops.abs, torch.abs)


@cases(
    ("both", [(6, 7)], lambda x: x.clamp(-0.5, 0.7), lambda x: x.clamp(-0.5, 0.7)),
    ("lo", [(13,)], lambda x: ops.clamp(x, lo=0.1), lambda x: torch.clamp(x, min=0.1)),
    ("hi", [(3, 0)], lambda x: ops.clamp(x, hi=0.1), lambda x: torch.clamp(x, max=0.1)),
    # values exactly on the bounds: torch passes the gradient through (lo <= x <= hi)
    ("on-bounds", [tied(9, 4)], lambda x: x.clamp(-1.0, 1.0), lambda x: x.clamp(-1.0, 1.0)),
)
def test_clamp(ref, rng, spec, f_sc, f_t):
    compare(ref, rng, spec, f_sc, f_t)


# ---- reductions ---------------------------------------------------------------------------------------
RED_AXES = [(None, False), (None, True), (0, False), (-1, True), (1, False), ((0, 2), False),
            ((0, 2), True), ((-1, 0, 1), False)]
RED_SHAPES = [(3, 4, 5), (7, 1, 13), (2, 0, 3)]


def _tdim(x, axis):
    return tuple(range(x.dim())) if axis is None else axis


@pytest.mark.filterwarnings("ignore:var.*degrees of freedom:UserWarning")  # torch, on zero-size inputs
@pytest.mark.parametrize("shape", RED_SHAPES, ids=[str(s) for s in RED_SHAPES])
@pytest.mark.parametrize("axis,keep", RED_AXES, ids=[f"{a}-{k}" for a, k in RED_AXES])
@pytest.mark.parametrize("op", ["sum", "mean", "max", "var", "var0"])
def test_reduce(ref, rng, op, axis, keep, shape):
    axes = range(len(shape)) if axis is None else [axis] if isinstance(axis, int) else axis
    empty = any(shape[a] == 0 for a in axes)
    if op == "sum":
        f_sc, f_t = (lambda x: x.sum(axis, keepdims=keep)), (lambda x: x.sum(_tdim(x, axis), keepdim=keep))
    elif op == "mean":
        f_sc, f_t = (lambda x: x.mean(axis, keepdims=keep)), (lambda x: x.mean(_tdim(x, axis), keepdim=keep))
    elif op == "max":
        if empty:
            pytest.skip("max over an empty axis is an error in both (see test_errors)")
        f_sc, f_t = (lambda x: x.max(axis, keepdims=keep)), (lambda x: x.amax(_tdim(x, axis), keepdim=keep))
    else:
        c = 1 if op == "var" else 0
        if empty or np.prod([shape[a] for a in axes]) <= c:
            pytest.skip("variance over too few elements is NaN with a NaN gradient in torch")
        f_sc = lambda x: x.var(axis, keepdims=keep, correction=c)
        f_t = lambda x: x.var(_tdim(x, axis), keepdim=keep, correction=c)
    compare(ref, rng, [shape], f_sc, f_t)


@cases(
    ("max-ties-axis", [tied(6, 7)], lambda x: x.max(0), lambda x: x.amax(0)),
    ("max-ties-all", [const(np.array([[1.0, 3.0, 3.0], [3.0, 0.0, -1.0]]))], lambda x: x.max(),
     lambda x: x.amax()),
    ("max-ties-tuple", [tied(3, 4, 5)], lambda x: ops.max(x, (0, 2), keepdims=True),
     lambda x: x.amax((0, 2), keepdim=True)),
    ("ops-sum", [(4, 6)], lambda x: ops.sum(x, 1), lambda x: x.sum(1)),
    ("ops-mean", [(4, 6)], lambda x: ops.mean(x, -2, keepdims=True), lambda x: x.mean(-2, keepdim=True)),
    ("ops-var", [(5, 8)], lambda x: ops.var(x, 1), lambda x: x.var(1)),
    ("var-correction2", [(5, 8)], lambda x: ops.var(x, 1, correction=2), lambda x: x.var(1, correction=2)),
    ("mean-empty-axis-is-nan", [(3, 0)], lambda x: x.mean(1), lambda x: x.mean(1)),
    ("sum-0d", [()], lambda x: x.sum(), lambda x: x.sum()),
    ("sum-0d-axis", [()], lambda x: x.sum(0), lambda x: x.sum(0)),
    ("max-0d-axis", [()], lambda x: x.max(-1), lambda x: x.amax(-1)),
    ("mean-0d-axis", [()], lambda x: x.mean(0, keepdims=True), lambda x: x.mean(0, keepdim=True)),
)
def test_reduce_misc(ref, rng, spec, f_sc, f_t):
    compare(ref, rng, spec, f_sc, f_t)


# ---- matmul -------------------------------------------------------------------------------------------
MM = [((5, 7), (7, 3)), ((2, 1, 5, 7), (3, 7, 4)), ((3, 7, 4), (4, 13)), ((13,), (13, 3)),
      ((5, 7), (7,)), ((7,), (7,)), ((7,), (2, 7, 3)), ((2, 3, 7), (7,)), ((1, 5, 7), (4, 1, 7, 2)),
      ((0, 3), (3, 4)), ((3, 0), (0, 4)), ((0, 2, 3), (3, 4)), ((5, 3), (3, 0)), ((1, 1), (1, 1))]


@pytest.mark.parametrize("shapes", MM, ids=[f"{a}@{b}" for a, b in MM])
def test_matmul(ref, rng, shapes):
    compare(ref, rng, list(shapes), lambda a, b: a @ b, lambda a, b: a @ b)


def test_matmul_ops_and_linear(ref, rng):
    compare(ref, rng, [(3, 5, 7), (7, 2)], ops.matmul, torch.matmul)
    compare(ref, rng, [(4, 7), (5, 7), (5,)], ops.linear, TF.linear)
    compare(ref, rng, [(2, 3, 7), (5, 7)], lambda x, w: ops.linear(x, w), lambda x, w: TF.linear(x, w))


@pytest.mark.parametrize("shapes", [[(2, 16), (32, 16), (32,)], [(2, 1, 16), (32, 16)], [(1, 40), (24, 40)]],
                         ids=["2d-bias", "3d", "one-row"])
def test_wide_linear_on_a_small_batch_and_its_weight_gradient_without_weight_transposes(ref, rng, shapes):
    """A weight that outweighs its batch's activations: y = (W x^T)^T and dW = dy^T x, against torch (f64)."""
    compare(ref, rng, shapes, ops.linear, TF.linear)


def test_ops_accept_arrays_and_scalars(ref, rng):
    """sc.ops functions take numpy arrays and Python scalars next to Tensors (converted to the Tensor's dtype)."""
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4,))
    x = sc.tensor(a, dtype="f64", device=ref)
    np.testing.assert_allclose(ops.add(x, b).numpy(), a + b, rtol=RTOL)
    np.testing.assert_allclose(ops.mul(2.0, x).numpy(), 2.0 * a, rtol=RTOL)
    np.testing.assert_allclose(ops.where(a > 0, x, b).numpy(), np.where(a > 0, a, b), rtol=RTOL)
    np.testing.assert_allclose(ops.embedding(x, np.array([2, 0, 2])).numpy(), a[[2, 0, 2]], rtol=RTOL)
    np.testing.assert_allclose(ops.gather(x, 1, np.array([[3], [0], [1]])).numpy(), a[[0, 1, 2], [3, 0, 1]][:, None])


# ---- shape ops ----------------------------------------------------------------------------------------
@cases(
    ("bt-prepend", [(3, 1)], lambda x: ops.broadcast_to(x, (2, 3, 5)), lambda x: torch.broadcast_to(x, (2, 3, 5))),
    ("bt-same-rank", [(1, 7)], lambda x: ops.broadcast_to(x, (13, 7)), lambda x: torch.broadcast_to(x, (13, 7))),
    ("bt-scalar", [()], lambda x: ops.broadcast_to(x, (4, 3)), lambda x: torch.broadcast_to(x, (4, 3))),
    ("bt-zero", [(1, 3)], lambda x: ops.broadcast_to(x, (0, 3)), lambda x: torch.broadcast_to(x, (0, 3))),
    ("expand", [(3, 1, 1)], lambda x: ops.expand(x, (3, 4, 5)), lambda x: x.expand(3, 4, 5)),
    ("m-expand", [(1, 4)], lambda x: x.expand(2, 3, 4), lambda x: x.expand(2, 3, 4)),
    ("m-expand-neg1", [(5, 1)], lambda x: x.expand(2, -1, 3), lambda x: x.expand(2, -1, 3)),
    ("reshape", [(2, 3, 5)], lambda x: x.reshape(5, 6), lambda x: x.reshape(5, 6)),
    ("reshape-neg1", [(2, 3, 5)], lambda x: x.reshape(-1, 3), lambda x: x.reshape(-1, 3)),
    ("reshape-tuple", [(2, 3, 5)], lambda x: ops.reshape(x, (3, 1, 10)), lambda x: x.reshape(3, 1, 10)),
    ("reshape-0d", [(1, 1)], lambda x: x.reshape(()), lambda x: x.reshape(())),
    ("reshape-zero", [(0, 6)], lambda x: x.reshape(3, -1, 2), lambda x: x.reshape(3, -1, 2)),
    ("view", [(4, 6)], lambda x: x.view(8, 3), lambda x: x.view(8, 3)),
    ("transpose", [(2, 3, 5)], lambda x: x.transpose(0, 2), lambda x: x.transpose(0, 2)),
    ("transpose-default", [(3, 7)], lambda x: x.transpose(), lambda x: x.transpose(-2, -1)),
    ("transpose-neg", [(2, 3, 5, 7)], lambda x: ops.transpose(x, -3, -1), lambda x: x.transpose(-3, -1)),
    ("T", [(3, 7)], lambda x: x.T, lambda x: x.T),
    ("permute", [(2, 3, 5, 7)], lambda x: x.permute(2, 0, 3, 1), lambda x: x.permute(2, 0, 3, 1)),
    ("permute-neg", [(2, 3, 5)], lambda x: ops.permute(x, (-1, 0, 1)), lambda x: x.permute(-1, 0, 1)),
    ("permute-zero", [(2, 0, 5)], lambda x: x.permute(2, 1, 0), lambda x: x.permute(2, 1, 0)),
    ("transpose-reshape-chain", [(2, 3, 5)], lambda x: x.transpose(0, 2).reshape(5, -1) * 2.0,
     lambda x: x.transpose(0, 2).reshape(5, -1) * 2.0),
)
def test_shape_ops(ref, rng, spec, f_sc, f_t):
    compare(ref, rng, spec, f_sc, f_t)


KEYS = [
    (slice(1, 6, 2), slice(None, None, 3)), 2, -1, (Ellipsis, 2), (None, 1, Ellipsis, None),
    slice(2, 100), slice(5, 2), (slice(None), None, slice(1, None, 4)), (1, slice(None), -2),
    Ellipsis, slice(-3, None), (slice(None, None, 10),), (Ellipsis, None), (-2, -1, 0),
    (slice(0, 7, 5), Ellipsis, slice(3, 4)),
]


@pytest.mark.parametrize("key", KEYS, ids=[repr(k) for k in KEYS])
def test_getitem(ref, rng, key):
    compare(ref, rng, [(7, 9, 5)], lambda x: x[key], lambda x: x[key])


def test_getitem_zero_size_and_chain(ref, rng):
    compare(ref, rng, [(0, 4)], lambda x: x[:, 1:3], lambda x: x[:, 1:3])
    compare(ref, rng, [(6, 5)], lambda x: x[3:3], lambda x: x[3:3])
    compare(ref, rng, [(6, 5)], lambda x: x[1:][::2, 1] * x[0, 0], lambda x: x[1:][::2, 1] * x[0, 0])
    # overlapping slices of one tensor: their gradients add up
    compare(ref, rng, [(9, 4)], lambda x: x[1:7:2] + x[2:8:2] * x[:3],
            lambda x: x[1:7:2] + x[2:8:2] * x[:3])


def test_getitem_tensor_index(ref, rng):
    idx = np.array([4, 0, 4, 2, 1])
    compare(ref, rng, [(5, 3)], lambda x: x[sc.tensor(idx, device=ref)], lambda x: x[torch.tensor(idx)])
    compare(ref, rng, [(5, 3)], lambda x: x[[1, 1, 3]], lambda x: x[[1, 1, 3]])
    compare(ref, rng, [(5, 3)], lambda x: x[[-1, 0, -5, -1]], lambda x: x[[-1, 0, -5, -1]])
    compare(ref, rng, [(5, 3)], lambda x: x[np.array([[2, -2], [0, 1]])], lambda x: x[np.array([[2, -2], [0, 1]])])


@cases(
    ("axis0", [(2, 3), (4, 3)], lambda a, b: ops.concat([a, b], 0), lambda a, b: torch.cat([a, b], 0)),
    ("axis-neg", [(2, 3, 1), (2, 3, 7), (2, 3, 2)], lambda a, b, c: ops.concat([a, b, c], -1),
     lambda a, b, c: torch.cat([a, b, c], -1)),
    ("with-empty", [(2, 0), (2, 5)], lambda a, b: ops.concat([a, b], 1), lambda a, b: torch.cat([a, b], 1)),
    ("single", [(3, 4)], lambda a: ops.concat([a], 0) * 2.0, lambda a: torch.cat([a], 0) * 2.0),
    ("same-twice", [(3, 4)], lambda a: ops.concat([a, a * 3.0], 0), lambda a: torch.cat([a, a * 3.0], 0)),
    ("stack0", [(3, 4), (3, 4)], lambda a, b: ops.stack([a, b]), lambda a, b: torch.stack([a, b])),
    ("stack-mid", [(3, 4), (3, 4), (3, 4)], lambda a, b, c: ops.stack([a, b, c], 1),
     lambda a, b, c: torch.stack([a, b, c], 1)),
    ("stack-last", [(5,), (5,)], lambda a, b: ops.stack([a, b], -1), lambda a, b: torch.stack([a, b], -1)),
    ("stack-zero", [(0, 2), (0, 2)], lambda a, b: ops.stack([a, b], 1), lambda a, b: torch.stack([a, b], 1)),
)
def test_concat_stack(ref, rng, spec, f_sc, f_t):
    compare(ref, rng, spec, f_sc, f_t)


# ---- gather / scatter / index_select / embedding ------------------------------------------------------
@cases(
    ("axis0", [(5, 7), ints(3, 7, hi=5)], lambda x, i: ops.gather(x, 0, i), lambda x, i: torch.gather(x, 0, i)),
    ("axis1", [(5, 7), ints(5, 11, hi=7)], lambda x, i: ops.gather(x, 1, i), lambda x, i: torch.gather(x, 1, i)),
    ("smaller-index", [(5, 7), ints(3, 4, hi=5)], lambda x, i: ops.gather(x, 0, i),
     lambda x, i: torch.gather(x, 0, i)),
    ("3d-neg-axis", [(2, 3, 13), ints(2, 3, 4, hi=13)], lambda x, i: ops.gather(x, -1, i),
     lambda x, i: torch.gather(x, -1, i)),
    ("empty-index", [(5, 7), ints(0, 7, hi=5)], lambda x, i: ops.gather(x, 0, i),
     lambda x, i: torch.gather(x, 0, i)),
)
def test_gather(ref, rng, spec, f_sc, f_t):
    compare(ref, rng, spec, f_sc, f_t)


@cases(
    ("axis0", [(5, 7), ints(3, 7, hi=5), (3, 7)], lambda b, i, s: ops.scatter_add(b, 0, i, s),
     lambda b, i, s: torch.scatter_add(b, 0, i, s)),
    ("axis1-smaller", [(5, 7), ints(4, 9, hi=7), (4, 9)], lambda b, i, s: ops.scatter_add(b, 1, i, s),
     lambda b, i, s: torch.scatter_add(b, 1, i, s)),
    ("3d", [(2, 3, 5), ints(2, 2, 6, hi=5), (2, 2, 6)], lambda b, i, s: ops.scatter_add(b, -1, i, s),
     lambda b, i, s: torch.scatter_add(b, -1, i, s)),
    ("empty", [(4, 3), ints(0, 3, hi=4), (0, 3)], lambda b, i, s: ops.scatter_add(b, 0, i, s),
     lambda b, i, s: torch.scatter_add(b, 0, i, s)),
)
def test_scatter_add(ref, rng, spec, f_sc, f_t):
    compare(ref, rng, spec, f_sc, f_t)


@cases(
    ("axis0", [(5, 3), ints(7, hi=5)], lambda x, i: ops.index_select(x, 0, i),
     lambda x, i: torch.index_select(x, 0, i)),
    ("axis1", [(2, 13, 3), ints(4, hi=13)], lambda x, i: ops.index_select(x, 1, i),
     lambda x, i: torch.index_select(x, 1, i)),
    ("axis-neg", [(2, 3, 5), ints(6, hi=5)], lambda x, i: ops.index_select(x, -1, i),
     lambda x, i: torch.index_select(x, -1, i)),
    ("empty", [(5, 3), ints(0, hi=5)], lambda x, i: ops.index_select(x, 0, i),
     lambda x, i: torch.index_select(x, 0, i)),
    ("embedding-1d", [(11, 4), ints(9, hi=11)], ops.embedding, lambda t, i: TF.embedding(i, t)),
    ("embedding-2d", [(7, 5), ints(3, 4, hi=7)], ops.embedding, lambda t, i: TF.embedding(i, t)),
)
def test_index_select_embedding(ref, rng, spec, f_sc, f_t):
    compare(ref, rng, spec, f_sc, f_t)


# ---- softmax / norms ----------------------------------------------------------------------------------
def _masked_logits(r):
    x = r.standard_normal((5, 7))
    x[r.random((5, 7)) < 0.4] = -np.inf
    x[:, 3] = r.standard_normal(5)
    return x


@cases(
    ("sm-last", [(4, 11)], lambda x: ops.softmax(x, -1), lambda x: torch.softmax(x, -1)),
    ("sm-axis0", [(5, 3)], lambda x: ops.softmax(x, 0), lambda x: torch.softmax(x, 0)),
    ("sm-mid", [(2, 7, 3)], lambda x: ops.softmax(x, 1), lambda x: torch.softmax(x, 1)),
    ("sm-method", [(3, 13)], lambda x: x.softmax(), lambda x: x.softmax(-1)),
    ("sm-zero-rows", [(0, 5)], lambda x: ops.softmax(x, -1), lambda x: torch.softmax(x, -1)),
    ("sm-size1", [(4, 1)], lambda x: ops.softmax(x, -1), lambda x: torch.softmax(x, -1)),
    ("sm-large", [lambda r: r.standard_normal((3, 9)) * 300.0], lambda x: ops.softmax(x, -1),
     lambda x: torch.softmax(x, -1)),
    ("lsm-last", [(4, 11)], lambda x: ops.log_softmax(x, -1), lambda x: torch.log_softmax(x, -1)),
    ("lsm-axis0", [(5, 3)], lambda x: ops.log_softmax(x, 0), lambda x: torch.log_softmax(x, 0)),
    ("lsm-3d", [(2, 3, 7)], lambda x: ops.log_softmax(x, -2), lambda x: torch.log_softmax(x, -2)),
    ("lsm-zero", [(3, 0, 2)], lambda x: ops.log_softmax(x, 0), lambda x: torch.log_softmax(x, 0)),
    # masked logits: -inf entries (every row keeps at least one finite entry)
    ("sm-neg-inf", [_masked_logits], lambda x: ops.softmax(x, -1), lambda x: torch.softmax(x, -1)),
    ("lsm-neg-inf", [_masked_logits], lambda x: ops.log_softmax(x, -1), lambda x: torch.log_softmax(x, -1)),
    ("lsm-large", [lambda r: r.standard_normal((3, 9)) * 300.0], lambda x: ops.log_softmax(x, -1),
     lambda x: torch.log_softmax(x, -1)),
)
def test_softmax(ref, rng, spec, f_sc, f_t):
    compare(ref, rng, spec, f_sc, f_t)


@cases(
    ("ln-wb", [(3, 8), (8,), (8,)], lambda x, w, b: ops.layer_norm(x, 8, w, b),
     lambda x, w, b: TF.layer_norm(x, (8,), w, b)),
    ("ln-2d-shape", [(2, 3, 5), (3, 5), (3, 5)], lambda x, w, b: ops.layer_norm(x, (3, 5), w, b),
     lambda x, w, b: TF.layer_norm(x, (3, 5), w, b)),
    ("ln-noaffine", [(4, 13)], lambda x: ops.layer_norm(x, 13), lambda x: TF.layer_norm(x, (13,))),
    ("ln-eps", [(2, 7)], lambda x: ops.layer_norm(x, 7, eps=0.1), lambda x: TF.layer_norm(x, (7,), eps=0.1)),
    ("ln-zero-batch", [(0, 6), (6,), (6,)], lambda x, w, b: ops.layer_norm(x, 6, w, b),
     lambda x, w, b: TF.layer_norm(x, (6,), w, b)),
    ("rms-w", [(4, 6), (6,)], lambda x, w: ops.rms_norm(x, 6, w, eps=1e-6),
     lambda x, w: TF.rms_norm(x, (6,), w, eps=1e-6)),
    ("rms-default-eps", [(3, 11), (11,)], lambda x, w: ops.rms_norm(x, 11, w),
     lambda x, w: TF.rms_norm(x, (11,), w)),
    ("rms-2d-shape", [(2, 3, 5), (3, 5)], lambda x, w: ops.rms_norm(x, (3, 5), w, eps=1e-5),
     lambda x, w: TF.rms_norm(x, (3, 5), w, eps=1e-5)),
    ("rms-now", [(5, 7)], lambda x: ops.rms_norm(x, 7), lambda x: TF.rms_norm(x, (7,))),
)
def test_norms(ref, rng, spec, f_sc, f_t):
    compare(ref, rng, spec, f_sc, f_t)


# ---- convolution and pooling --------------------------------------------------------------------------
CONV = [  # (x shape, w shape, bias, kwargs)
    ((2, 4, 7, 6), (6, 2, 3, 2), True, dict(stride=(2, 1), padding=1, groups=2)),
    ((1, 3, 13, 11), (5, 3, 3, 3), False, dict(stride=2, padding=(2, 0), dilation=(2, 1))),
    ((3, 6, 5, 5), (6, 1, 3, 3), True, dict(padding=1, groups=6)),
    ((2, 3, 7, 7), (4, 3, 1, 1), True, dict(stride=3)),
    ((1, 2, 5, 9), (3, 2, 5, 2), False, dict(dilation=(1, 3), padding=(2, 1))),
    ((0, 2, 5, 5), (3, 2, 3, 3), True, dict()),
    ((1, 1, 3, 3), (1, 1, 3, 3), True, dict()),
]


@pytest.mark.parametrize("xs,ws,bias,kw", CONV, ids=[f"{c[0]}*{c[1]}-{c[3]}" for c in CONV])
def test_conv2d(ref, rng, xs, ws, bias, kw):
    spec = [xs, ws] + ([(ws[0],)] if bias else [])
    compare(ref, rng, spec, lambda x, w, *b: ops.conv2d(x, w, *b, **kw),
            lambda x, w, *b: TF.conv2d(x, w, *b, **kw))


POOL = [((2, 3, 7, 7), 3, 2, 1), ((1, 2, 13, 8), (3, 2), (2, 3), (1, 0)), ((2, 1, 6, 6), 2, None, 0),
        ((2, 1, 5, 5), 3, 1, 0), ((1, 2, 7, 9), (2, 3), (1, 2), (1, 1)), ((0, 3, 4, 4), 2, None, 0)]


@pytest.mark.parametrize("xs,k,s,p", POOL, ids=[str(c) for c in POOL])
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool2d(ref, rng, kind, xs, k, s, p):
    # continuous random data: no ties inside a window (torch's max_pool2d sends a tied gradient to the
    # first maximum, the engine splits it like amax; that difference is deliberate and not tested)
    if kind == "max":
        compare(ref, rng, [xs], lambda x: ops.max_pool2d(x, k, s, p), lambda x: TF.max_pool2d(x, k, s, p))
    else:
        compare(ref, rng, [xs], lambda x: ops.avg_pool2d(x, k, s, p), lambda x: TF.avg_pool2d(x, k, s, p))


@cases(
    ("basic", [(2, 3, 6, 5)], lambda x: ops.unfold(x, (2, 3)), lambda x: TF.unfold(x, (2, 3))),
    ("strided", [(1, 2, 9, 7)], lambda x: ops.unfold(x, 3, stride=2, padding=1, dilation=(1, 2)),
     lambda x: TF.unfold(x, 3, stride=2, padding=1, dilation=(1, 2))),
    # a non-zero pad value has no torch.unfold argument: pad explicitly in torch, then unfold
    ("pad-value", [(2, 1, 4, 5)], lambda x: ops.unfold(x, 3, padding=1, pad_value=-2.5),
     lambda x: TF.unfold(TF.pad(x, (1, 1, 1, 1), value=-2.5), 3)),
)
def test_unfold(ref, rng, spec, f_sc, f_t):
    compare(ref, rng, spec, f_sc, f_t)


# ---- attention ----------------------------------------------------------------------------------------
def _lower_right(lq, lk):
    """The engine's causal mask is aligned bottom-right (query i sees keys <= i + lk - lq), like
    flash-attention and torch.nn.attention.bias.causal_lower_right; for lq == lk it is is_causal."""
    return torch.ones(lq, lk, dtype=torch.bool).tril(lk - lq)


ATTN = [  # (q, k, v shapes, causal, mask shape or None, scale)
    ((2, 5, 4), (2, 7, 4), (2, 7, 3), False, None, None),
    ((2, 5, 4), (2, 7, 4), (2, 7, 3), True, None, None),
    ((1, 2, 6, 8), (1, 2, 6, 8), (1, 2, 6, 5), True, None, None),
    ((1, 2, 6, 8), (1, 2, 6, 8), (1, 2, 6, 8), False, None, 0.3),
    ((2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 6), False, (2, 3, 5, 7), None),
    ((2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 6), False, (5, 7), None),
    ((2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 6), False, (2, 1, 1, 7), None),
    ((2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 6), True, (5, 7), None),
    ((1, 7, 3), (1, 4, 3), (1, 4, 2), True, None, None),   # lq > lk: the first rows see no key
    ((13, 1, 3), (13, 1, 3), (13, 1, 1), True, None, None),
    ((2, 0, 4), (2, 3, 4), (2, 3, 5), False, None, None),   # zero-size: no queries, no keys, no batch
    ((2, 3, 4), (2, 0, 4), (2, 0, 5), False, None, None),
    ((0, 3, 4), (0, 3, 4), (0, 3, 5), True, None, None),
]


@pytest.mark.parametrize("qs,ks,vs,causal,ms,scale", ATTN, ids=[str(a) for a in ATTN])
def test_attention(ref, rng, qs, ks, vs, causal, ms, scale):
    lq, lk = qs[-2], ks[-2]
    mask = None if ms is None else rng.random(ms) < 0.6
    if mask is not None:
        mask.reshape(-1, ms[-1])[0] = False  # one query row that may attend to nothing: output 0, like torch

    def f_sc(q, k, v):
        m = None if mask is None else sc.tensor(mask, device=ref)
        return ops.attention(q, k, v, causal=causal, mask=m, scale=scale)

    def f_t(q, k, v):
        m = None if mask is None else torch.tensor(mask)
        if causal and (lq != lk or m is not None):
            m = _lower_right(lq, lk) if m is None else m & _lower_right(lq, lk)
            return TF.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=scale)
        return TF.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=causal, scale=scale)

    compare(ref, rng, [qs, ks, vs], f_sc, f_t)


def test_attention_in_a_graph(ref, rng):
    """Attention output used twice and combined with other ops; the gradient flows through both uses."""
    def f_sc(x, wq):
        q = x @ wq
        o = ops.attention(q, x, x * 2.0, causal=True)
        return o * o + o.sum(-1, keepdims=True)

    def f_t(x, wq):
        q = x @ wq
        o = TF.scaled_dot_product_attention(q, x, x * 2.0, is_causal=True)
        return o * o + o.sum(-1, keepdim=True)

    compare(ref, rng, [(2, 6, 4), (4, 4)], f_sc, f_t)


# ---- casts --------------------------------------------------------------------------------------------
def test_cast_floats_match_torch(ref, rng):
    a = rng.standard_normal((7, 13)) * 10.0
    x = sc.tensor(a, dtype="f64", device=ref)
    ta = torch.tensor(a)
    for d, td in (("f32", torch.float32), ("f16", torch.float16)):
        y = x.to(d)
        assert y.dtype == d
        np.testing.assert_array_equal(y.numpy(), ta.to(td).numpy())
        np.testing.assert_array_equal(y.to("f64").numpy(), ta.to(td).to(torch.float64).numpy())
    np.testing.assert_array_equal(x.to("f32").to("f16").numpy(), ta.to(torch.float32).to(torch.float16).numpy())
    np.testing.assert_array_equal(ops.cast(x, "float16").numpy(), ta.to(torch.float16).numpy())


@pytest.mark.parametrize("src", ["f64", "f32", "f16"])
def test_cast_to_i8_truncates(ref, rng, src):
    a = np.concatenate([rng.uniform(-128.9, 127.9, 200), [-0.9, -0.1, 0.0, 0.5, 0.99, 126.5, -127.99, 3.0, -3.0]])
    tdt = {"f64": torch.float64, "f32": torch.float32, "f16": torch.float16}[src]
    x = sc.tensor(a, dtype="f64", device=ref).to(src)
    t = torch.tensor(a).to(tdt)
    y = x.to("i8")
    assert y.dtype == "i8"
    got, want = y.numpy(), t.to(torch.int8).numpy()
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(x.to("i32").numpy(), t.to(torch.int32).numpy())
    # and back: i8 -> floats is exact
    for d, td in (("f32", torch.float32), ("f16", torch.float16), ("f64", torch.float64)):
        np.testing.assert_array_equal(y.to(d).numpy(), t.to(torch.int8).to(td).numpy())


def test_cast_bool_and_int(ref):
    a = np.array([-2.0, 0.0, 0.5, 3.0])
    x = sc.tensor(a, dtype="f64", device=ref)
    np.testing.assert_array_equal(x.to("bool").numpy(), torch.tensor(a).to(torch.bool).numpy())
    b = sc.tensor(np.array([True, False, True]), device=ref)
    np.testing.assert_array_equal(b.to("f32").numpy(), np.array([1.0, 0.0, 1.0], np.float32))
    i = sc.tensor(np.array([-5, 0, 7]), device=ref)
    assert i.dtype == "i32"
    np.testing.assert_array_equal(i.to("f64").numpy(), np.array([-5.0, 0.0, 7.0]))
    np.testing.assert_array_equal(i.to("i8").numpy(), np.array([-5, 0, 7], np.int8))


def test_cast_out_of_range_saturates(ref):
    """Out-of-range float -> int casts are undefined in torch; the engine saturates (and NaN -> 0)."""
    a = np.array([300.0, -300.0, 1e10, -1e10, np.inf, -np.inf, np.nan, 126.9])
    for src in ("f64", "f32"):
        x = sc.tensor(a, dtype="f64", device=ref).to(src)
        np.testing.assert_array_equal(x.to("i8").numpy(), np.array([127, -128, 127, -128, 127, -128, 0, 126], np.int8))
        big, small = 2**31 - 1, -2**31
        np.testing.assert_array_equal(x.to("i32").numpy(),
                                      np.array([300, -300, big, small, big, small, 0, 126], np.int32))


def test_cast_gradient(ref, rng):
    """The gradient of a float cast is the upstream gradient cast back (torch does the same rounding)."""
    a = rng.standard_normal((5, 6))
    g = rng.standard_normal((5, 6))
    for d, td in (("f32", torch.float32), ("f16", torch.float16)):
        x = sc.tensor(a, dtype="f64", device=ref, requires_grad=True)
        t = torch.tensor(a, requires_grad=True)
        y, ty = x.to(d), t.to(td)
        (y * sc.tensor(g, device=ref).to(d)).sum().backward()
        (ty * torch.tensor(g).to(td)).sum().backward()
        assert x.grad.dtype == "f64"
        np.testing.assert_array_equal(x.grad.numpy(), t.grad.numpy())
    # a cast in the middle of f64 math: only the f32 rounding of the forward value differs from pure f64
    compare(ref, rng, [(4, 7)], lambda x: x.to("f32").to("f64").exp() * x,
            lambda x: x.to(torch.float32).to(torch.float64).exp() * x)


# ---- dropout ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_dropout_rate_and_gradient(ref, rng, p):
    shape = (201, 149)
    a = rng.standard_normal(shape) + 3.0  # never exactly 0, so the mask is readable from the output
    x = sc.tensor(a, dtype="f64", device=ref, requires_grad=True)
    y = ops.dropout(x, p, sc.rng.Generator(1234))
    out = y.numpy()
    kept = out != 0
    n = kept.size
    rate = 1.0 - kept.mean()
    assert abs(rate - p) < 5.0 * np.sqrt(p * (1 - p) / n), (rate, p)
    # no structure: rows and columns drop at the same rate (a broken counter layout would show here)
    for part in (kept[: shape[0] // 2], kept[shape[0] // 2:], kept[:, ::2], kept[:, 1::2]):
        assert abs((1.0 - part.mean()) - p) < 6.0 * np.sqrt(p * (1 - p) / part.size)
    np.testing.assert_allclose(out[kept], a[kept] / (1.0 - p), rtol=1e-15)
    g = rng.standard_normal(shape)
    (y * sc.tensor(g, dtype="f64", device=ref)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), g * kept / (1.0 - p), rtol=1e-15, atol=0)


def test_dropout_streams(ref, rng):
    a = rng.standard_normal((64, 64)) + 3.0
    x = sc.tensor(a, dtype="f64", device=ref)
    m1 = ops.dropout(x, 0.5, sc.rng.Generator(7)).numpy() != 0
    m2 = ops.dropout(x, 0.5, sc.rng.Generator(7)).numpy() != 0
    np.testing.assert_array_equal(m1, m2)            # same seed, same position: same mask
    gen = sc.rng.Generator(7)
    d1 = ops.dropout(x, 0.5, gen).numpy() != 0
    d2 = ops.dropout(x, 0.5, gen).numpy() != 0       # the stream advanced: a fresh mask
    np.testing.assert_array_equal(d1, m1)
    assert (d1 != d2).mean() > 0.3
    m3 = ops.dropout(x, 0.5, sc.rng.Generator(8)).numpy() != 0
    assert (m1 != m3).mean() > 0.3
    np.testing.assert_array_equal(ops.dropout(x, 0.0, gen).numpy(), a)
    np.testing.assert_array_equal(ops.dropout(x, 0.9, gen, training=False).numpy(), a)


# ---- finite differences: an independent check of a few gradients (no torch involved) -----------------
def _fd_check(ref, rng, f_sc, shapes, eps=1e-6, rtol=1e-6, atol=1e-8):
    """Central differences in float64: error O(eps^2) plus rounding O(1e-16/eps) -> rtol 1e-6."""
    arrs = [rng.standard_normal(s) for s in shapes]
    xs = [sc.tensor(a, dtype="f64", device=ref, requires_grad=True) for a in arrs]
    out = f_sc(*xs)
    g = rng.standard_normal(out.shape)
    gt = sc.tensor(g, dtype="f64", device=ref)
    (out * gt).sum().backward()
    for i, a in enumerate(arrs):
        num = np.zeros_like(a)
        for j in np.ndindex(a.shape):
            vals = []
            for sgn in (1, -1):
                b = [c.copy() for c in arrs]
                b[i][j] += sgn * eps
                ys = [sc.tensor(c, dtype="f64", device=ref) for c in b]
                vals.append(float((f_sc(*ys).numpy() * g).sum()))
            num[j] = (vals[0] - vals[1]) / (2 * eps)
        np.testing.assert_allclose(xs[i].grad.numpy(), num, rtol=rtol, atol=atol, err_msg=f"input {i}")


@pytest.mark.parametrize("name", ["attention-mask", "pool-pad", "gelu-erf", "var-layer"])
def test_finite_differences(ref, rng, name):
    if name == "attention-mask":
        mask = sc.tensor(rng.random((3, 4)) < 0.7, device=ref)
        _fd_check(ref, rng, lambda q, k, v: ops.attention(q, k, v, mask=mask, causal=True),
                  [(3, 2), (4, 2), (4, 3)])
    elif name == "pool-pad":
        _fd_check(ref, rng, lambda x: ops.max_pool2d(x, 3, 2, 1) + ops.avg_pool2d(x, 2, 1, 1)[..., :3, :3],
                  [(1, 2, 5, 5)])
    elif name == "gelu-erf":
        _fd_check(ref, rng, lambda x: ops.gelu(x) * ops.erf(x), [(3, 4)])
    else:
        _fd_check(ref, rng, lambda x, w: ops.var(ops.layer_norm(x, 5) * w, -1, keepdims=True) * x,
                  [(3, 5), (5,)])
