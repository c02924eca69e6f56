"""Philox-4x32-10 (Salmon et al., SC'11) in numpy, bit-exact with kernels/philox.wgsl.

Why counter-based: the bits for (seed, stream, position) do not depend on how threads are laid out,
so numpy and every GPU draw the same numbers, and a resumed run replays every draw.
Word w of a stream comes from counter block w // 4 (as a 64-bit value in the first two counter
words), lane w % 4.
"""
from __future__ import annotations

import blake3
import numpy as np

M0, M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
W0, W1 = np.uint32(0x9E3779B9), np.uint32(0xBB67AE85)
MASK = np.uint64(0xFFFFFFFF)


def philox4x32(counter, key, rounds: int = 10) -> np.ndarray:
    """Philox-4x32 on counters [..., 4] and keys [..., 2] (uint32); returns [..., 4] uint32."""
    c = np.asarray(counter, dtype=np.uint32)
    k = np.asarray(key, dtype=np.uint32)
    c0, c1, c2, c3 = (c[..., i].astype(np.uint64) for i in range(4))
    k0, k1 = k[..., 0].astype(np.uint64), k[..., 1].astype(np.uint64)
    for r in range(rounds):
        if r:
            k0 = (k0 + np.uint64(W0)) & MASK
            k1 = (k1 + np.uint64(W1)) & MASK
        p0 = M0 * c0
        p1 = M1 * c2
        hi0, lo0 = p0 >> np.uint64(32), p0 & MASK
        hi1, lo1 = p1 >> np.uint64(32), p1 & MASK
        c0, c1, c2, c3 = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0)
    return np.stack([c0, c1, c2, c3], axis=-1).astype(np.uint32)


def stream_id(name: str) -> int:
    return int.from_bytes(blake3.blake3(name.encode()).digest()[:4], "little")


def stream_key(seed: int, stream: str) -> tuple[int, int]:
    """The Philox key of a named sub-stream of a seed: (low 32 bits of seed, high 32 bits ^ stream id)."""
    seed = int(seed) & ((1 << 64) - 1)
    return seed & 0xFFFFFFFF, ((seed >> 32) ^ stream_id(stream)) & 0xFFFFFFFF


def stream_bits(key, offset: int, n: int) -> np.ndarray:
    """Words offset .. offset+n-1 of the stream with this key (uint32)."""
    if n == 0:
        return np.zeros(0, np.uint32)
    first, last = offset // 4, (offset + n - 1) // 4
    blocks = np.arange(first, last + 1, dtype=np.uint64)
    ctr = np.zeros((blocks.size, 4), np.uint32)
    ctr[:, 0] = (blocks & MASK).astype(np.uint32)
    ctr[:, 1] = (blocks >> np.uint64(32)).astype(np.uint32)
    words = philox4x32(ctr, np.broadcast_to(np.array(key, np.uint32), (blocks.size, 2))).reshape(-1)
    start = offset - first * 4
    return words[start:start + n]


def bits_to_uniform(bits: np.ndarray) -> np.ndarray:
    """[0, 1) float32 from the top 24 bits: exact in f32, so every device gets the same value."""
    return ((bits >> np.uint32(8)).astype(np.float32) * np.float32(1.0 / (1 << 24))).astype(np.float32)
