"""Generators: a seed plus a position per named sub-stream; the state is a small dict that serializes.

Why positions and not hidden state: a checkpoint stores {stream: position}, and a resumed run continues
every stream at exactly the word it stopped at.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ScellisError
from .philox import bits_to_uniform, stream_bits, stream_key

STREAMS = ("init", "dropout", "shuffle", "augment")


class Stream:
    """One named sub-stream; each draw takes the next words of it."""

    def __init__(self, gen: "Generator", name: str, base=None):
        self.gen, self.name = gen, name
        self.key = stream_key(gen.seed, name)
        self.base = base            # a step input: the stream's position when the step starts (u32 [lo, hi])

    @property
    def position(self) -> int:
        return self.gen.positions.get(self.name, 0)

    def take(self, nwords: int) -> int:
        pos = self.position
        self.gen.positions[self.name] = pos + int(nwords)
        return pos

    # host-side draws (numpy), bit-identical with the device ones ------------------------------------
    def bits(self, n: int) -> np.ndarray:
        return stream_bits(self.key, self.take(n), n)

    def uniform(self, shape) -> np.ndarray:
        return bits_to_uniform(self.bits(math.prod(shape))).reshape(shape)

    def open_uniform(self, n: int) -> np.ndarray:
        """n uniforms in (0, 1) as float64, one word each ((w + 0.5) / 2^32: never exactly 0 or 1), for
        host-side decisions (sampling by weight, a Beta draw by inverse CDF, a probability gate)."""
        return (self.bits(n).astype(np.float64) + 0.5) / 2.0 ** 32

    def integers(self, n: int, hi: int) -> np.ndarray:
        """n uniform integers in [0, hi), one word each (multiply-shift; bias below hi / 2^32)."""
        return ((self.bits(n).astype(np.uint64) * np.uint64(hi)) >> np.uint64(32)).astype(np.int64)

    def normal(self, shape) -> np.ndarray:
        """Box-Muller in float64 from pairs of words, rounded once to f32 (host side, e.g. for init)."""
        n = math.prod(shape)
        w = self.bits(2 * n).reshape(n, 2) if n else np.zeros((0, 2), np.uint32)
        u1 = ((w[:, 0] >> 8).astype(np.float64) + 1.0) / (1 << 24)
        u2 = (w[:, 1] >> 8).astype(np.float64) / (1 << 24)
        return (np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)).astype(np.float32).reshape(shape)

    def permutation(self, n: int) -> np.ndarray:
        """A uniformly random permutation: argsort of one word per element, ties broken by index."""
        keys = self.bits(n)
        return np.argsort(keys, kind="stable").astype(np.int64)


class Generator:
    """Keyed by a seed; `gen.stream("dropout")` is the dropout sub-stream, any user name works too."""

    def __init__(self, seed: int = 0, positions: dict | None = None):
        if not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ScellisError(f"seed must be a non-negative integer, got {seed!r}", code="bad-seed")
        self.seed = int(seed)
        self.positions: dict[str, int] = dict(positions or {})

    def stream(self, name: str) -> Stream:
        if not isinstance(name, str) or not name:
            raise ScellisError(f"stream names are non-empty strings, got {name!r}", code="bad-stream")
        return Stream(self, name)

    def permutation(self, n: int, stream: str = "shuffle") -> np.ndarray:
        return self.stream(stream).permutation(n)

    def state_dict(self) -> dict:
        return {"seed": self.seed, "positions": dict(sorted(self.positions.items()))}

    @classmethod
    def from_state(cls, state: dict) -> "Generator":
        return cls(state["seed"], state.get("positions"))

    def __repr__(self) -> str:
        return f"Generator(seed={self.seed}, positions={self.positions})"



def base_words(position: int):
    """A stream position as the u32 [lo, hi] a step's `rng:<stream>` input takes."""
    return np.array([position & 0xFFFFFFFF, (position >> 32) & 0xFFFFFFFF], np.uint32)

