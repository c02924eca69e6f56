"""The op -> launcher table: each kernel family registers the ops it implements with `@launcher(...)`."""
from __future__ import annotations

from typing import Callable

LAUNCHERS: dict[str, Callable] = {}


def launcher(*ops: str) -> Callable:
    def deco(fn):
        for op in ops:
            LAUNCHERS[op] = fn
        return fn
    return deco
