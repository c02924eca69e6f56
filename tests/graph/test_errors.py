"""Bad input raises the library's ScellisError subclasses, with a message naming the op and the shapes."""
from __future__ import annotations

import re

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter import ops
from scellis_jupyter.errors import DTypeError, GraphError, KernelError, ScellisError, ShapeError


def T(ref, *shape, dtype="f64", grad=False):
    return sc.tensor(np.ones(shape), dtype=dtype, device=ref, requires_grad=grad)


def raises(cls, *needles):
    """pytest.raises(cls) whose message contains every needle (literally, shapes included)."""
    return pytest.raises(cls, match="(?s)" + "".join(f"(?=.*{re.escape(n)})" for n in needles))


def test_errors_are_scellis_errors():
    for cls in (ShapeError, DTypeError, GraphError, KernelError):
        assert issubclass(cls, ScellisError)


@pytest.mark.parametrize("a,b", [((2, 3), (4, 5)), ((2, 5, 3), (4, 2)), ((3,), (4, 5)), ((2, 3), (4,)),
                                 ((3,), (4,))])
def test_matmul_inner_mismatch(ref, a, b):
    with raises(ShapeError, "op 'matmul'", "inner", str(a), str(b)):
        T(ref, *a) @ T(ref, *b)


def test_matmul_batch_mismatch(ref):
    with raises(ShapeError, "op 'matmul'", "(2, 3, 4)", "(5, 4, 2)"):
        T(ref, 2, 3, 4) @ T(ref, 5, 4, 2)


@pytest.mark.parametrize("op,f", [("add", lambda a, b: a + b), ("mul", lambda a, b: a * b),
                                  ("sub", lambda a, b: a - b), ("lt", lambda a, b: a < b),
                                  ("maximum", ops.maximum)])
def test_broadcast_failure(ref, op, f):
    with raises(ShapeError, f"op '{op}'", "(2, 3)", "(4,)", "broadcast"):
        f(T(ref, 2, 3), T(ref, 4))


def test_broadcast_failure_where_and_expand(ref):
    cond = sc.tensor(np.ones((3, 1), bool), device=ref)
    with raises(ShapeError, "op 'where'", "(3, 1)", "(2, 5)"):
        ops.where(cond, T(ref, 2, 5), T(ref, 5))
    with raises(ShapeError, "op 'expand'", "(2, 3)", "(4, 3)"):
        T(ref, 2, 3).expand(4, 3)


@pytest.mark.parametrize("target", [(4, 2), (-1, 4), (7,), (-1, -1), (0, -1), (2, -3)])
def test_bad_reshape(ref, target):
    with raises(ShapeError, "op 'reshape'", "(2, 3)", str(target)):
        T(ref, 2, 3).reshape(*target)


@pytest.mark.parametrize("name,f", [
    ("reduce_sum", lambda x: x.sum(2)),
    ("reduce_sum", lambda x: x.sum((0, -3))),
    ("reduce_max", lambda x: x.max(5)),
    ("mean", lambda x: x.mean(-3)),
    ("softmax", lambda x: ops.softmax(x, 2)),
    ("log_softmax", lambda x: ops.log_softmax(x, -3)),
    ("concat", lambda x: ops.concat([x, x], 2)),
    ("stack", lambda x: ops.stack([x, x], 4)),
    ("gather", lambda x: ops.gather(x, 2, sc.tensor(np.zeros((2, 3), int), device=x.device))),
    ("transpose", lambda x: x.transpose(0, 2)),
    ("permute", lambda x: x.permute(0, 2)),
    ("index_select", lambda x: ops.index_select(x, -3, sc.tensor(np.zeros(2, int), device=x.device))),
])
def test_axis_out_of_range(ref, name, f):
    needles = [f"op '{name}'", "out of range"] + (["(2, 3)"] if name != "stack" else ["rank 3"])
    with raises(ShapeError, *needles):
        f(T(ref, 2, 3))


@pytest.mark.parametrize("op,f", [
    ("add", lambda a, b: a + b), ("div", lambda a, b: a / b), ("eq", lambda a, b: a == b),
    ("matmul", lambda a, b: a @ b.T), ("concat", lambda a, b: ops.concat([a, b], 0)),
    ("where", lambda a, b: ops.where(a > 0.0, a, b)),
])
def test_dtype_mismatch(ref, op, f):
    a, b = T(ref, 2, 3), T(ref, 2, 3, dtype="f32")
    with raises(DTypeError, f"op '{op}'", "f64", "f32", "(2, 3)"):
        f(a, b)


def test_dtype_errors_other(ref):
    ints = sc.tensor(np.ones((3,), int), device=ref)
    with raises(DTypeError, "op 'exp'", "(3,):i32"):
        ops.exp(ints)
    with raises(DTypeError, "op 'where'", "(2, 3):f64"):
        ops.where(T(ref, 2, 3), T(ref, 2, 3), T(ref, 2, 3))
    with raises(DTypeError, "op 'attention'", "bool"):
        ops.attention(T(ref, 2, 3), T(ref, 4, 3), T(ref, 4, 3), mask=T(ref, 2, 4))
    with raises(DTypeError, "f31", "f32"):  # unknown dtype, with a did-you-mean hint
        T(ref, 2).to("f31")
    with raises(GraphError, "i32"):
        sc.tensor(np.ones(3, int), device=ref, requires_grad=True)


@pytest.mark.parametrize("shape", [(3,), (2, 1), (0,)])
def test_backward_on_non_scalar(ref, shape):
    x = T(ref, *shape, grad=True)
    with raises(GraphError, "backward", "scalar", str(shape)):
        ops.exp(x).backward()
    assert x.grad is None


def test_backward_without_grad_leaves(ref):
    with raises(GraphError, "requires grad"):
        T(ref, 3).sum().backward()


@pytest.mark.parametrize("name,f", [
    ("gather", lambda x, i: ops.gather(x, 0, i)),
    ("gather", lambda x, i: ops.embedding(x, i[0])),
    ("gather", lambda x, i: x[i[0]]),
    ("scatter_add", lambda x, i: ops.scatter_add(x, 0, i, sc.tensor(np.ones(i.shape), dtype="f64", device=x.device))),
])
@pytest.mark.parametrize("bad", [5, 9, -6])
def test_index_out_of_range(ref, name, f, bad):
    x = T(ref, 5, 3)
    i = sc.tensor(np.array([[0, bad, 1]]), device=ref)
    with raises(KernelError, f"op '{name}'", "out of range", "size 5"):
        f(x, i).numpy()
    # the failed program leaves the engine usable
    np.testing.assert_array_equal((x * 2.0).numpy(), np.full((5, 3), 2.0))


def test_gather_index_message_names_shapes(ref):
    x = T(ref, 5, 3)
    i = sc.tensor(np.array([[0, 7, 1]]), device=ref)
    with raises(KernelError, "op 'gather'", "index 7", "(5, 3)", "(1, 3)"):
        ops.gather(x, 0, i).numpy()


def test_other_shape_errors(ref):
    with raises(ShapeError, "op 'reduce_max'", "(2, 0)"):
        T(ref, 2, 0).max(1)
    with raises(ShapeError, "op 'getitem'", "index 5", "size 3"):
        T(ref, 3, 4)[5]
    with raises(ShapeError, "op 'getitem'", "(3, 4)"):
        T(ref, 3, 4)[0, 1, 2]
    with raises(ShapeError, "op 'getitem'", "step"):
        T(ref, 3, 4)[::-1]
    with raises(ShapeError, "op 'permute'", "permutation", "(3, 4)"):
        T(ref, 3, 4).permute(0, 0)
    with raises(ShapeError, "op 'concat'", "(2, 3)", "(2, 4)"):
        ops.concat([T(ref, 2, 3), T(ref, 2, 4)], 0)
    with raises(ShapeError, "op 'gather'", "(5, 3)", "(2, 4)"):
        ops.gather(T(ref, 5, 3), 0, sc.tensor(np.zeros((2, 4), int), device=ref))
    with raises(ShapeError, "op 'conv2d'", "(1, 3, 5, 5)", "(2, 2, 3, 3)"):
        ops.conv2d(T(ref, 1, 3, 5, 5), T(ref, 2, 2, 3, 3))
    with raises(ShapeError, "op 'unfold'", "(3, 3)", "(2, 2)"):
        ops.conv2d(T(ref, 1, 2, 2, 2), T(ref, 2, 2, 3, 3))
    with raises(ShapeError, "op 'attention'", "(2, 5, 4)", "(2, 7, 3)"):
        ops.attention(T(ref, 2, 5, 4), T(ref, 2, 7, 3), T(ref, 2, 7, 3))
    with raises(ShapeError, "op 'attention'", "(3, 7)"):
        ops.attention(T(ref, 2, 5, 4), T(ref, 2, 7, 4), T(ref, 2, 7, 4),
                      mask=sc.tensor(np.ones((3, 7), bool), device=ref))
    with raises(ShapeError, "op 'layer_norm'", "(4,)", "(2, 3)"):
        ops.layer_norm(T(ref, 2, 3), 4)
    with raises(ShapeError, "op 'rms_norm'", "(3, 2)", "(2, 3)"):
        ops.rms_norm(T(ref, 2, 3), (3, 2))
    with raises(ShapeError, "op 'dropout'", "1.0"):
        ops.dropout(T(ref, 3), 1.0)
