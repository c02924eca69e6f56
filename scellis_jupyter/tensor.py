"""The eager façade: a torch-like Tensor over a lazy Node, realized through the one executor.

Why lazy under an eager face: operators only build nodes; `.numpy()`, `.backward()`, `.item()` and
printing compile the pending subgraph into a Program (cached by content hash) and run it.
"""
from __future__ import annotations

import numpy as np

from . import dtypes as dt
from .errors import DeviceError, GraphError
from .executor.executor import realize
from .graph import functional as F
from .graph.autodiff import grad as _grad
from .graph.node import Node
from .backends.device import Device, device as pick
from .graph.node import toposort
from .errors import DTypeError


def _device(device):
    if isinstance(device, Device):
        return device
    return pick(device)


def _leaf(arr: np.ndarray, dtype: str, dev) -> Node:
    storage = dev.impl.from_numpy(arr, dtype)
    return Node("const", (), {}, tuple(arr.shape), dtype, storage=storage)


class Tensor:
    __slots__ = ("node", "device", "__weakref__")
    __array_priority__ = 1000

    def __init__(self, node: Node, device):
        self.node = node
        self.device = device

    @classmethod
    def _from_node(cls, node: Node, device=None) -> "Tensor":
        return cls(node, _device(device))

    # ---- properties ---------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        return tuple(self.node.shape)

    @property
    def dtype(self) -> str:
        return self.node.dtype

    @property
    def ndim(self) -> int:
        return len(self.node.shape)

    @property
    def requires_grad(self) -> bool:
        return self.node.requires_grad

    @requires_grad.setter
    def requires_grad(self, v: bool) -> None:
        self.node.requires_grad = bool(v)

    @property
    def grad(self):
        g = self.node.grad
        return None if g is None else Tensor(g, self.device)

    @grad.setter
    def grad(self, v) -> None:
        self.node.grad = None if v is None else v.node

    @property
    def tier(self) -> str | None:
        """The determinism tier of the program that computed this tensor: set once it is realized (by
        `.numpy()`, `.item()`, printing, `.realize()`, or `.backward()` on it); None before."""
        return self.node.tier

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    # ---- realization --------------------------------------------------------------------------------
    def realize(self, tier: str | None = None) -> "Tensor":
        realize([self.node], self.device.impl, tier)
        return self

    def numpy(self) -> np.ndarray:
        (s,) = realize([self.node], self.device.impl)
        return s.numpy()

    def item(self):
        if self.node.numel != 1:
            raise GraphError(f"item() needs one element, the tensor has shape {self.shape}")
        return self.numpy().reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a.astype(dtype) if dtype is not None else a

    def __repr__(self) -> str:
        body = np.array2string(self.numpy(), precision=4, separator=", ")
        return f"tensor({body}, dtype={self.dtype}, device={self.device.backend})"

    def __bool__(self) -> bool:
        return bool(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def detach(self) -> "Tensor":
        self.realize()
        n = Node("const", (), {}, self.shape, self.dtype, storage=self.node.storage)
        return Tensor(n, self.device)

    def to(self, dtype_or_device) -> "Tensor":
        if isinstance(dtype_or_device, Device) or dtype_or_device in ("wgpu", "reference"):
            dev = _device(dtype_or_device)
            return tensor(self.numpy(), dtype=self.dtype, device=dev, requires_grad=self.requires_grad)
        return _wrap(F.cast(self.node, dtype_or_device), self)

    def backward(self, gradient=None) -> None:
        """Accumulate d(self)/d(leaf) into `.grad` of every leaf that requires grad."""
        leaves = [n for n in toposort([self.node], cut_realized=False) if n.requires_grad and not n.inputs]
        if not leaves:
            raise GraphError("nothing requires grad in this graph", hint="create leaves with requires_grad=True")
        go = None if gradient is None else [_as_node(gradient, self).node]
        gs = _grad([self.node], leaves, go)
        new = []
        for leaf, g in zip(leaves, gs):
            if g is None:
                continue
            if g.dtype != leaf.dtype:
                g = F.cast(g, leaf.dtype)
            if tuple(g.shape) != tuple(leaf.shape):
                g = F.expand(F.reshape(g, (1,) * (len(leaf.shape) - len(g.shape)) + tuple(g.shape)), leaf.shape)
            leaf.grad = g if leaf.grad is None else F.add(leaf.grad, g)
            new.append(leaf.grad)
        # the output is computed in the same program as its gradients (as torch has it by then): `.tier` and
        # `.item()` after backward() need no second program, and report the tier the gradients ran under
        realize(new + [self.node], self.device.impl)

    # ---- operators ----------------------------------------------------------------------------------
    def _bin(self, other, fn, rev=False):
        o = _as_node(other, self)
        a, b = (o.node, self.node) if rev else (self.node, o.node)
        return _wrap(fn(a, b), self)

    __add__ = lambda s, o: s._bin(o, F.add)
    __radd__ = lambda s, o: s._bin(o, F.add, True)
    __sub__ = lambda s, o: s._bin(o, F.sub)
    __rsub__ = lambda s, o: s._bin(o, F.sub, True)
    __mul__ = lambda s, o: s._bin(o, F.mul)
    __rmul__ = lambda s, o: s._bin(o, F.mul, True)
    __truediv__ = lambda s, o: s._bin(o, F.div)
    __rtruediv__ = lambda s, o: s._bin(o, F.div, True)
    __pow__ = lambda s, o: s._bin(o, F.pow_)
    __rpow__ = lambda s, o: s._bin(o, F.pow_, True)
    __matmul__ = lambda s, o: s._bin(o, F.matmul)
    __rmatmul__ = lambda s, o: s._bin(o, F.matmul, True)
    __lt__ = lambda s, o: s._bin(o, F.lt)
    __le__ = lambda s, o: s._bin(o, F.le)
    __gt__ = lambda s, o: s._bin(o, F.gt)
    __ge__ = lambda s, o: s._bin(o, F.ge)
    __eq__ = lambda s, o: s._bin(o, F.eq)
    __ne__ = lambda s, o: s._bin(o, F.ne)
    __hash__ = object.__hash__

    def __neg__(self):
        return _wrap(F.neg(self.node), self)

    def __abs__(self):
        return _wrap(F.abs_(self.node), self)

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        key = tuple(_as_node(k, self).node if isinstance(k, (Tensor, np.ndarray, list)) else k for k in key)
        return _wrap(F.getitem(self.node, key), self)

    # ---- methods ------------------------------------------------------------------------------------
    def sum(self, axis=None, keepdims=False):
        return _wrap(F.sum_(self.node, axis, keepdims), self)

    def mean(self, axis=None, keepdims=False):
        return _wrap(F.mean(self.node, axis, keepdims), self)

    def max(self, axis=None, keepdims=False):
        return _wrap(F.max_(self.node, axis, keepdims), self)

    def var(self, axis=None, keepdims=False, correction=1):
        return _wrap(F.var(self.node, axis, keepdims, correction), self)

    def reshape(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return _wrap(F.reshape(self.node, shape), self)

    view = reshape

    def transpose(self, a=-2, b=-1):
        return _wrap(F.transpose(self.node, a, b), self)

    def permute(self, *perm):
        perm = perm[0] if len(perm) == 1 and isinstance(perm[0], (tuple, list)) else perm
        return _wrap(F.permute(self.node, perm), self)

    @property
    def T(self):
        return _wrap(F.permute(self.node, tuple(reversed(range(self.ndim)))), self)

    def expand(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return _wrap(F.broadcast_to(self.node, shape), self)

    def exp(self): return _wrap(F.exp(self.node), self)
    def log(self): return _wrap(F.log(self.node), self)
    def tanh(self): return _wrap(F.tanh(self.node), self)
    def sigmoid(self): return _wrap(F.sigmoid(self.node), self)
    def relu(self): return _wrap(F.relu(self.node), self)
    def sqrt(self): return _wrap(F.sqrt(self.node), self)
    def abs(self): return _wrap(F.abs_(self.node), self)

    def clamp(self, lo=None, hi=None):
        return _wrap(F.clamp(self.node, lo, hi), self)

    def softmax(self, axis=-1):
        return _wrap(F.softmax(self.node, axis), self)


def _wrap(node: Node, like: Tensor) -> Tensor:
    return Tensor(node, like.device)


def _as_node(x, like: Tensor) -> Tensor:
    if isinstance(x, Tensor):
        if x.device is not like.device and x.device.backend != like.device.backend:
            raise DeviceError(f"tensors on different devices: {like.device} and {x.device}",
                              hint="move one with .to(device)")
        return x
    if isinstance(x, (int, float, bool, np.floating, np.integer)) and not isinstance(x, np.ndarray):
        return Tensor(F.scalar(x, like.dtype if dt.is_float(like.dtype) or isinstance(x, (int, np.integer)) else "f32"), like.device)
    arr = np.asarray(x)
    d = like.dtype if arr.dtype.kind == "f" and dt.is_float(like.dtype) else dt.canon(arr.dtype if arr.dtype != np.int64 else np.int32)
    return tensor(arr, dtype=d, device=like.device)


def tensor(data, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A tensor from array-like data; float64 input becomes f32 unless dtype says otherwise."""
    dev = _device(device)
    if isinstance(data, Tensor):
        data = data.numpy()
    arr = np.asarray(data)
    if dtype is None:
        dtype = "f32" if arr.dtype.kind == "f" else "bool" if arr.dtype.kind == "b" else dt.canon(
            np.int32 if arr.dtype.kind in "iu" else arr.dtype)
    dtype = dt.canon(dtype)
    if dtype == "f64" and dev.backend != "reference":
        raise DTypeError("f64 is supported on the reference backend only", where=f"device {dev.name}",
                         hint="use f32, or device='reference' for float64 checks")
    if dtype == "i32" and arr.dtype.kind in "iu" and arr.size and (arr.max() > 2**31 - 1 or arr.min() < -2**31):
        raise DTypeError("integer data does not fit in i32", where="sc.tensor")
    node = _leaf(arr.astype(dt.to_numpy(dtype) if dtype != "bool" else bool), dtype, dev)
    node.requires_grad = bool(requires_grad)
    if requires_grad and not dt.is_float(dtype):
        raise GraphError(f"only floating-point tensors can require grad, got {dtype}", where="sc.tensor")
    return Tensor(node, dev)
