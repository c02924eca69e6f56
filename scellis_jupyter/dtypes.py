"""The dtypes the engine knows, their sizes and their numpy and WGSL spellings.

f64 exists only on the reference backend (it is how we compare with PyTorch in float64); wgpu refuses it.
int8 is stored packed, four to a 32-bit word, so the memory plan counts one byte per element.
"""
from __future__ import annotations

import numpy as np

from .errors import DTypeError, did_you_mean

DTYPES = {
    "f64": np.float64, "f32": np.float32, "f16": np.float16,
    "i32": np.int32, "i8": np.int8, "u32": np.uint32, "bool": np.bool_,
}
ALIASES = {"float64": "f64", "float32": "f32", "float16": "f16", "half": "f16", "float": "f32",
           "int32": "i32", "int8": "i8", "uint32": "u32", "bool_": "bool", "double": "f64"}
FLOATS = ("f64", "f32", "f16")
ITEMSIZE = {"f64": 8, "f32": 4, "f16": 2, "i32": 4, "i8": 1, "u32": 4, "bool": 4}  # bool is a u32 on GPU


def canon(dtype) -> str:
    """Normalize a dtype given as a name, numpy dtype or type to one of DTYPES' keys."""
    if isinstance(dtype, str):
        name = ALIASES.get(dtype, dtype)
        if name in DTYPES:
            return name
        raise DTypeError(f"unknown dtype {dtype!r}", hint=did_you_mean(dtype, list(DTYPES) + list(ALIASES))
                         or f"use one of {', '.join(DTYPES)}")
    try:
        npdt = np.dtype(dtype)
    except TypeError:
        raise DTypeError(f"unknown dtype {dtype!r}") from None
    for k, v in DTYPES.items():
        if np.dtype(v) == npdt:
            return k
    if npdt.kind in "iu":
        return "i32"
    if npdt == np.float64:
        return "f64"
    raise DTypeError(f"dtype {npdt} is not supported", hint=f"use one of {', '.join(DTYPES)}")


def to_numpy(dtype: str):
    return DTYPES[dtype]


def is_float(dtype: str) -> bool:
    return dtype in FLOATS


def nbytes(shape, dtype: str) -> int:
    n = 1
    for s in shape:
        n *= s
    return n * ITEMSIZE[dtype]


def promote(a: str, b: str) -> str:
    """Result dtype of a binary op: floats win over ints, wider float wins; bool is the weakest."""
    if a == b:
        return a
    order = ["bool", "i8", "u32", "i32", "f16", "f32", "f64"]
    return a if order.index(a) > order.index(b) else b
