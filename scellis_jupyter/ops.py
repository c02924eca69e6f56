"""`sc.ops`: every graph function, taking and returning Tensors (arrays and scalars are accepted too)."""
from __future__ import annotations

import functools

import numpy as np

from .graph import functional as _F
from .rng import Generator
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


def dropout(x: Tensor, p: float, gen: Generator | None = None, stream: str = "dropout",
            training: bool = True) -> Tensor:
    """Inverted dropout with its mask from `gen`'s `stream` (a Generator; seed 0 if not given)."""
    gen = gen if gen is not None else Generator(0)
    return Tensor(_F.dropout(x.node, p, gen.stream(stream), training), x.device)


# random draws as tensors: the same (seed, stream, position) gives the same values on every device
def uniform(shape, gen: Generator | None = None, stream: str = "init", device=None) -> Tensor:
    """Uniforms in [0, 1), drawn on the device from `gen`'s `stream` (bit-identical to the host draw)."""
    gen = gen if gen is not None else Generator(0)
    return Tensor._from_node(_F.uniform_node(gen.stream(stream), tuple(shape)), device)


def normal(shape, gen: Generator | None = None, stream: str = "init", device=None, mean: float = 0.0,
           std: float = 1.0) -> Tensor:
    """Normal draws (Box-Muller on the host in float64, rounded once to f32), uploaded to `device`."""
    gen = gen if gen is not None else Generator(0)
    return tensor(gen.stream(stream).normal(tuple(shape)) * np.float32(std) + np.float32(mean), device=device)


def bernoulli(shape, p: float, gen: Generator | None = None, stream: str = "dropout", device=None) -> Tensor:
    """True with probability p, from the same uniforms as `uniform` (u < p)."""
    return uniform(shape, gen, stream, device) < p


__all__ += ["dropout", "uniform", "normal", "bernoulli"]
