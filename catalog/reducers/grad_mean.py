"""The batch-mean loss and gradients from per-slice means: sum of n_i * value_i in float64, over the total n.

Why this shape: a slice's gradients are tens of MB (the GPT benchmark's 10.6 M floats), so the reduction is
memory-bound host work between GPU steps. A leaf keeps its float32 gradients as they came (half the bytes of
float64 to move between workers) and the first combine widens them while adding; every pass runs in chunks on
a few threads (numpy's ufuncs release the GIL), the pieces of every gradient in one batch (most of the GPT's
104 gradients are one or two pieces each, so a batch per gradient left the threads idle). Each element is
computed exactly as the plain forms compute it
(n * float64(g), pairwise float64 sums in the tree's order, (sum / N) rounded once to float32), so the bits do
not depend on chunking or threads.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from scellis_jupyter.catalog import reducer

CHUNK = 1 << 19           # elements a thread takes at a time (4 MiB of float64)
_POOL: list = []


def _each(jobs: list) -> None:
    """fn(lo, hi) over [0, n) in CHUNK pieces for every (fn, n) of `jobs`, on threads when there is more than one
    piece in all."""
    pieces = [(fn, lo, min(n, lo + CHUNK)) for fn, n in jobs for lo in range(0, max(n, 1), CHUNK)]
    if len(pieces) <= 1:
        for fn, lo, hi in pieces:
            fn(lo, hi)
        return
    if not _POOL:
        _POOL.append(ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1), thread_name_prefix="grad_mean"))
    list(_POOL[0].map(lambda piece: piece[0](piece[1], piece[2]), pieces))


def _flat(v) -> np.ndarray:
    return np.ascontiguousarray(v).reshape(-1)


def _scaled(x: dict, k: str, lo: int, hi: int, flat: np.ndarray) -> np.ndarray:
    """Elements [lo, hi) of x's n * gradient k in float64: as stored once scaled, else widened here."""
    return flat[lo:hi] if x["scaled"] else np.multiply(flat[lo:hi], x["n"], dtype=np.float64)


@reducer("grad_mean", summary="data-parallel gradients: per-slice means weighted by slice size, float64 sums")
class GradMean:
    def leaf(self, index, result):
        n = int(result["n"])
        return {"n": n, "loss": n * float(result["loss"]), "grads": dict(result["grads"]), "scaled": False}

    def combine(self, a, b):
        if set(a["grads"]) != set(b["grads"]):
            raise ValueError(f"slices disagree on the parameters: {sorted(set(a['grads']) ^ set(b['grads']))}")
        grads, jobs = {}, []
        for k in sorted(a["grads"]):
            fa, fb = _flat(a["grads"][k]), _flat(b["grads"][k])
            if fa.size != fb.size:
                raise ValueError(f"slices disagree on the shape of {k!r}: {np.shape(a['grads'][k])} and "
                                 f"{np.shape(b['grads'][k])}")
            out = np.empty(np.shape(a["grads"][k]), np.float64)
            fo = out.reshape(-1)
            jobs.append((lambda lo, hi, k=k, fa=fa, fb=fb, fo=fo:
                         np.add(_scaled(a, k, lo, hi, fa), _scaled(b, k, lo, hi, fb), out=fo[lo:hi]), fo.size))
            grads[k] = out
        _each(jobs)
        return {"n": a["n"] + b["n"], "loss": a["loss"] + b["loss"], "grads": grads, "scaled": True}

    def finish(self, acc):
        n = acc["n"]
        grads, jobs = {}, []
        for k, v in acc["grads"].items():
            # divided in float64 and rounded once into the float32 result (the bits of (v / n).astype(float32))
            fv, out = _flat(v), np.empty(np.shape(v), np.float32)
            fo = out.reshape(-1)
            jobs.append((lambda lo, hi, k=k, fv=fv, fo=fo:
                         np.divide(_scaled(acc, k, lo, hi, fv), n, out=fo[lo:hi], casting="same_kind"), fo.size))
            grads[k] = out
        _each(jobs)
        return {"n": n, "loss": acc["loss"] / n, "grads": grads}
