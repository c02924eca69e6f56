"""`sc.ops`: every graph function, taking and returning Tensors (arrays and scalars are accepted too)."""
from __future__ import annotations

import functools

import numpy as np

from .graph import functional as _F
from .tensor import Tensor, _as_node, tensor

__all__: list[str] = []


def _unwrap(x, like):
    if isinstance(x, Tensor):
        return x.node
    if isinstance(x, np.ndarray) and like is not None:
        return _as_node(x, like).node
    if isinstance(x, (list, tuple)) and x and any(isinstance(i, Tensor) for i in x):
        return type(x)(_unwrap(i, like) for i in x)
    return x


def _first_tensor(args):
    for a in args:
        if isinstance(a, Tensor):
            return a
        if isinstance(a, (list, tuple)):
            t = _first_tensor(a)
            if t is not None:
                return t
    return None


def _export(name, fn):
    @functools.wraps(fn)
    def op(*args, **kwargs):
        like = _first_tensor(list(args) + list(kwargs.values()))
        if like is None and args:
            like = tensor(args[0])
            args = (like,) + tuple(args[1:])
        out = fn(*[_unwrap(a, like) for a in args], **{k: _unwrap(v, like) for k, v in kwargs.items()})
        return Tensor(out, like.device) if like is not None else Tensor._from_node(out)
    globals()[name] = op
    __all__.append(name)


_NAMES = {"pow_": "pow", "abs_": "abs", "sum_": "sum", "max_": "max", "slice_": "slice"}
for _n in ("add sub mul div pow_ maximum minimum lt le gt ge eq ne neg exp log tanh sigmoid relu gelu silu "
           "sqrt rsqrt abs_ sign sin cos reciprocal erf where clamp cast sum_ max_ mean var matmul reshape "
           "permute transpose expand broadcast_to slice_ concat stack gather scatter_add index_select "
           "embedding softmax log_softmax layer_norm rms_norm unfold conv2d max_pool2d avg_pool2d linear "
           "attention").split():
    _export(_NAMES.get(_n, _n), getattr(_F, _n))


def dropout(x: Tensor, p: float, gen=None, stream: str = "dropout", training: bool = True) -> Tensor:
    """Inverted dropout with its mask from `gen`'s `stream` (a Generator; seed 0 if not given)."""
    from .rng import Generator
    gen = gen if gen is not None else Generator(0)
    return Tensor(_F.dropout(x.node, p, gen.stream(stream), training), x.device)


__all__.append("dropout")
