"""Kernel launchers by op: each module registers the ops it implements into LAUNCHERS."""
from __future__ import annotations

LAUNCHERS: dict = {}


def launcher(*ops):
    def deco(fn):
        for op in ops:
            LAUNCHERS[op] = fn
        return fn
    return deco


from . import elementwise, basic  # noqa: E402,F401
import importlib as _il  # noqa: E402

for _m in ("fused", "reduce", "softmax", "matmul", "attention", "indexing", "conv", "random", "quant"):
    try:
        _il.import_module(f"{__name__}.{_m}")
    except ModuleNotFoundError as _e:  # families land one by one; a missing one only lacks its ops
        if _e.name != f"{__name__}.{_m}":
            raise
