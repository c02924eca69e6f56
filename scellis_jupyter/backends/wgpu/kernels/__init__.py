"""Kernel launchers by op: each family module registers the ops it implements into LAUNCHERS."""
from __future__ import annotations

from . import (attention, conv, elementwise, fused, indexing, matmul, norm, quant, random,  # noqa: F401
               reduce, reduce_many, softmax)
from . import epilogue  # noqa: F401
from .registry import LAUNCHERS, launcher

__all__ = ["LAUNCHERS", "launcher"]
