"""The one pairwise order every reduction combines in, on workers or on the client (so both give the same bits)."""
from __future__ import annotations

from typing import Any, Callable


def pairwise(level: list, combine: Callable[[Any, Any], Any],
             root: Callable[[Any, Any], Any] | None = None) -> tuple[Any, bool]:
    """Combine `level` in pairs, in order ((a, b), (c, d), ...; an odd last item moves up unpaired) until one
    is left. `root(a, b)`, when given, makes the last combination instead of `combine` (a reducer's
    combine_finish: the root's combine and the finish in one pass). Returns (value, whether root made it)."""
    level = list(level)
    while len(level) > 1:
        if len(level) == 2 and root is not None:
            return root(level[0], level[1]), True
        nxt = [combine(a, b) for a, b in zip(level[0::2], level[1::2])]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0], False
