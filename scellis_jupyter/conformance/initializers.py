"""Conformance of initializer entries: shapes, dtype, seeded determinism and the declared distribution's moments."""
from __future__ import annotations

import builtins
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ..catalog.registry import Entry, checker
from ..errors import ScellisError
from ..rng import Generator

_REQUIRED = ((5, 3), 3, 5)


_OPTIONAL = (((3, 8), 8, 3), ((4, 2, 3, 3), 18, 36), ((7,), 7, 7), ((64, 48), 48, 64))


def _draw(init: Any, case: tuple, seed: int) -> tuple[np.ndarray, int]:
    g = Generator(seed)
    s = g.stream("init")
    out = init(case[0], case[1], case[2], s, name="check.weight")
    return out, s.position


def _hyper(entry: Entry, shape: tuple, folder: Path) -> dict:
    hook = getattr(entry.obj, "check_hyper", None)
    return dict(hook(tuple(shape), folder)) if callable(hook) else {}


@checker("initializer")
def check_initializer(entry: Entry) -> builtins.list[str]:
    """Shape and dtype, finite, same stream state -> same array, seed dependence matching `random`."""
    try:
        entry.make()
    except Exception as e:
        return [f"instantiate: make() with default hyperparameters raised {type(e).__name__}: {e}"]
    rand = getattr(entry.obj, "random", None)
    if not isinstance(rand, bool):
        return ["interface: declare random = True (draws from the stream) or False"]
    failed: builtins.list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in (_REQUIRED,) + _OPTIONAL:
            shape, at = case[0], f" (shape {case[0]})"
            try:
                init = entry.make(**_hyper(entry, shape, Path(tmp)))
                if not callable(init):
                    return ["interface: the instance is not callable as init(shape, fan_in, fan_out, stream, name)"]
                a, pos_a = _draw(init, case, 0)
            except ScellisError:
                if case is _REQUIRED:
                    failed.append(f"runs: refused a 2-D weight{at}")
                continue                      # an entry may decline a shape it does not support, clearly
            except Exception as e:
                failed.append(f"runs: raised {type(e).__name__}: {e}{at}")
                continue
            if not isinstance(a, np.ndarray) or a.dtype != np.float32 or a.shape != tuple(shape):
                got = f"{a.shape}:{a.dtype}" if isinstance(a, np.ndarray) else type(a).__name__
                failed.append(f"shape-dtype: returned {got}, expected {tuple(shape)}:float32{at}")
                continue
            if not np.all(np.isfinite(a)):
                failed.append(f"finite: non-finite values{at}")
            b, pos_b = _draw(init, case, 0)
            if not (np.array_equal(a.view(np.uint32), b.view(np.uint32)) and pos_a == pos_b):
                failed.append(f"deterministic: the same seed gave different arrays or stream positions{at}")
            c, _ = _draw(init, case, 1)
            if rand:
                if pos_a == 0:
                    failed.append(f"stream-advanced: random = True but the stream did not advance{at}")
                if np.array_equal(a, c) and a.size > 1:
                    failed.append(f"seed-dependent: seeds 0 and 1 gave the same array{at}")
            else:
                if pos_a != 0:
                    failed.append(f"stream-untouched: random = False but the stream advanced by {pos_a}{at}")
                if not np.array_equal(a, c):
                    failed.append(f"seed-independent: random = False but seeds 0 and 1 differ{at}")
    return failed
