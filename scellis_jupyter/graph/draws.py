"""The generator of a compiled step: each stream's start is a step input, so one Program draws new words
every step (the draws themselves are `functional.uniform_node` / `bits_node`)."""
from __future__ import annotations

from ..errors import ScellisError
from ..rng.generator import Generator, Stream
from . import functional as F


class StepGenerator(Generator):
    """Draws of one compiled step: positions count from the step's start, and each stream's absolute
    start is a step input (`bases[name]`, a u32 [lo, hi] placeholder), so the same Program draws new
    words every step. After building, `positions` says how far each stream advances per step.
    """

    def __init__(self, seed: int = 0, positions: dict | None = None, bases: dict | None = None):
        super().__init__(seed, positions)
        self.bases: dict = bases if bases is not None else {}

    def stream(self, name: str) -> Stream:
        if not isinstance(name, str) or not name:
            raise ScellisError(f"stream names are non-empty strings, got {name!r}", code="bad-stream")
        if name not in self.bases:
            self.bases[name] = F.placeholder((2,), "u32", f"rng:{name}")
        return Stream(self, name, self.bases[name])

    def replay(self, positions: dict) -> "StepGenerator":
        """The same step streams from earlier positions (recompute draws the same words again)."""
        return StepGenerator(self.seed, positions, self.bases)
