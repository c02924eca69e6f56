"""Monte-Carlo simulation on a Pool: sample i draws words [i*k, (i+1)*k) of one Philox stream, wherever it runs.

Why counter-based draws: a shard covering samples [lo, hi) computes its uniforms from the stream key and the
sample index alone (rng.philox), so no worker shares or advances a generator, the draws are the same on 1
or N workers, and a re-execution check re-draws exactly what the peer drew. Each shard returns its count,
mean and M2; the `moments` reducer combines them on workers in shard order (Chan's pairwise update).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..errors import PoolError
from ..rng.philox import bits_to_uniform, stream_bits, stream_key
from .job import Job
from .pool import JobResult, Pool


def draws(seed: int, stream: str, lo: int, hi: int, k: int) -> np.ndarray:
    """Uniforms in [0, 1) of samples lo..hi-1, k per sample: [hi - lo, k] float64 (exact f32 values)."""
    bits = stream_bits(stream_key(seed, stream), lo * k, (hi - lo) * k)
    return bits_to_uniform(bits).astype(np.float64).reshape(hi - lo, k)


def mc_shard(payload: dict, *, fn: Callable, seed: int, stream: str, k: int) -> dict:
    """On a worker: fn over the shard's samples; their count, mean and M2 (sum of squared deviations)."""
    lo, hi = int(payload["lo"]), int(payload["hi"])
    v = np.asarray(fn(draws(seed, stream, lo, hi, k)), np.float64)
    if v.shape[:1] != (hi - lo,):
        raise PoolError(f"the simulated function returned shape {list(v.shape)} for {hi - lo} samples",
                        where="simulate", hint="return one value (or one row) per sample")
    mean = v.mean(axis=0)
    return {"n": hi - lo, "mean": mean, "m2": ((v - mean) ** 2).sum(axis=0)}


def sample_ranges(n: int, shards: int) -> list[dict]:
    """`shards` contiguous ranges of n sample indices (sizes differing by at most one)."""
    if n < 1 or shards < 1 or shards > n:
        raise PoolError(f"cannot cut {n} samples into {shards} shards", where="simulate",
                        hint="give 1 <= shards <= n")
    cuts = np.linspace(0, n, shards + 1).round().astype(np.int64)
    return [{"lo": int(a), "hi": int(b)} for a, b in zip(cuts[:-1], cuts[1:])]


def simulate_job(fn: Callable, n: int, *, k: int, seed: int = 0, stream: str = "montecarlo", shards: int = 8,
                 verify: str = "none", **job_kw) -> Job:
    """The Job of a simulation of `n` samples: fn maps [m, k] uniforms to m values (or m rows)."""
    return Job(mc_shard, inputs={"items": sample_ranges(int(n), int(shards))},
               params={"fn": fn, "seed": int(seed), "stream": str(stream), "k": int(k)}, reduction="moments",
               verify=verify, name="montecarlo", work=lambda p: (p["hi"] - p["lo"]) * int(k), **job_kw)


def simulate(pool: Pool, fn: Callable, n: int, *, k: int, **kw) -> JobResult:
    """Estimate E[fn(U)] over n samples of k uniforms; value = {"n", "mean", "var", "stderr"}."""
    return pool.run(simulate_job(fn, n, k=k, **kw))
