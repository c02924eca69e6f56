"""Kernel launchers by op: each module registers the ops it implements into LAUNCHERS."""
from __future__ import annotations

LAUNCHERS: dict = {}


def launcher(*ops):
    def deco(fn):
        for op in ops:
            LAUNCHERS[op] = fn
        return fn
    return deco


# every family registers its ops on import
from . import (  # noqa: E402, F401
    attention,
    conv,
    elementwise,
    fused,
    indexing,
    matmul,
    quant,
    random,
    reduce,
    softmax,
)
