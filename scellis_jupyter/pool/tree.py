"""The one pairwise order every reduction combines in, on workers or on the client (so both give the same bits)."""
from __future__ import annotations

from typing import Any, Callable


def pairwise(level: list, combine: Callable[[Any, Any], Any]) -> Any:
    """Combine `level` in pairs, in order ((a, b), (c, d), ...; an odd last item moves up unpaired) until one
    is left, and return it."""
    level = list(level)
    while len(level) > 1:
        nxt = [combine(a, b) for a, b in zip(level[0::2], level[1::2])]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]
