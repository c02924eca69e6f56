"""A Job (what to compute, content-addressed) and the Shards a Partitioner cuts it into.

Why content addresses: a Job's hash names its program, inputs and parameters (BLAKE3 over a canonical
encoding, arrays by their bytes, dtype and shape), so two peers, a receipt and a re-run all agree on what
was asked, and a shard's hash ties its result to exactly the slice it was given.
"""
from __future__ import annotations

import hashlib
import inspect
import json
from dataclasses import dataclass, field
from typing import Any, Callable

import blake3
import numpy as np

from ..catalog import get as catalog_get
from ..errors import PoolError

METHODS = ("none", "reference", "spot", "quorum", "freivalds")


def content_hash(obj: Any) -> str:
    """BLAKE3 of a canonical encoding: dicts by sorted key, arrays by dtype, shape and bytes."""
    h = blake3.blake3()
    _feed(h, obj)
    return h.hexdigest()


def _feed(h, obj: Any) -> None:
    if isinstance(obj, np.ndarray):
        a = np.ascontiguousarray(obj)
        h.update(f"nd:{a.dtype.str}:{a.shape}:".encode())
        h.update(a.tobytes())
    elif isinstance(obj, dict):
        h.update(b"{")
        for k in sorted(obj, key=str):
            _feed(h, str(k))
            _feed(h, obj[k])
        h.update(b"}")
    elif isinstance(obj, (list, tuple)):
        h.update(b"[")
        for v in obj:
            _feed(h, v)
        h.update(b"]")
    elif hasattr(obj, "content_id"):              # a DataProgram: named by what it builds, not how it runs
        h.update(b"prog:" + obj.content_id().encode())
    elif callable(obj):
        h.update(b"fn:" + program_id(obj).encode())
    elif isinstance(obj, (np.generic,)):
        _feed(h, obj.item())
    else:
        h.update(("v:" + json.dumps(obj, sort_keys=True, default=repr)).encode())


def program_id(fn: Callable) -> str:
    """A callable named by its qualified name and the hash of its source (its bytecode when sourceless)."""
    target = getattr(fn, "func", fn)             # functools.partial
    name = f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', repr(target))}"
    try:
        src = inspect.getsource(target).encode()
    except (OSError, TypeError):
        code = getattr(target, "__code__", None)
        src = code.co_code if code is not None else repr(target).encode()
    return f"{name}@{hashlib.blake2s(src, digest_size=8).hexdigest()}"


@dataclass(frozen=True)
class Shard:
    """One piece of a Job: its index, the payload its worker computes on, and its content hash."""

    job: str
    index: int
    payload: Any
    hash: str


@dataclass
class Job:
    """Run `fn(payload, **params)` over the shards `partitioner` cuts `inputs` into; combine with `reduction`.

    `verify` declares how each result is accepted: "none", "reference" (re-executed on the client with
    `reference`, default `fn`, within `tolerance`), "spot" (that check on a CSPRNG-chosen `fraction` of
    shards), "quorum" (`replicas` distinct workers must agree), "freivalds" (a shard computing A @ B is
    checked in O(n^2) with `rounds` random 0/1 vectors: false accept <= 2^-rounds). `work` is the cost
    model a receipt's work units come from (FLOPs by default where `flops` is given), never the clock.

    Trust (pool/trust.py): `classification` is "public", "internal" or "confidential", for the whole job or as
    {input name or "model": class}; `safety_critical` marks a job no open pool may run. `canaries` plants that
    many shards with known answers per peer, at CSPRNG-chosen places (Pool.run).
    """

    fn: Callable
    inputs: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)
    partitioner: str = "items"
    partition: dict = field(default_factory=dict)
    reduction: str = "collect"
    verify: str = "none"
    reference: Callable | None = None
    tolerance: float = 1e-6
    fraction: float = 0.25
    replicas: int = 2
    rounds: int = 20
    work: Callable[[Any], int] | None = None
    name: str = ""
    classification: str | dict | None = None
    safety_critical: bool = False
    canaries: int = 0

    def __post_init__(self):
        if self.verify not in METHODS:
            raise PoolError(f"unknown verification method {self.verify!r}", where=f"Job {self.name or ''}".strip(),
                            hint=f"use one of {', '.join(METHODS)}")
        if not 0.0 <= self.fraction <= 1.0:
            raise PoolError(f"spot-check fraction {self.fraction} is not in [0, 1]", where="Job",
                            hint="give fraction=0.25 for one shard in four on average")
        if self.replicas < 2 and self.verify == "quorum":
            raise PoolError(f"a quorum needs at least 2 replicas, got {self.replicas}", where="Job",
                            hint="give replicas=2 or more")
        if self.canaries < 0:
            raise PoolError(f"canaries={self.canaries} is negative", where="Job", hint="give canaries=0 or more")
        catalog_get("partitioner", self.partitioner)
        catalog_get("reducer", self.reduction)

    @property
    def hash(self) -> str:
        return content_hash({"program": self.fn, "reference": self.reference, "inputs": self.inputs,
                             "params": self.params, "partitioner": [self.partitioner, self.partition],
                             "reduction": self.reduction, "verify": self.verify, "tolerance": self.tolerance})

    def shards(self) -> list[Shard]:
        """The shards the declared partitioner cuts this Job into (each content-addressed)."""
        cut = catalog_get("partitioner", self.partitioner).make(**self.partition)
        payloads = list(cut(self.inputs))
        if not payloads:
            raise PoolError(f"partitioner {self.partitioner!r} cut the job into no shards", where="Job",
                            hint="give it at least one item")
        jh = self.hash
        return [Shard(jh, i, p, content_hash({"job": jh, "index": i, "payload": p})) for i, p in enumerate(payloads)]

    def work_units(self, shard: Shard) -> int:
        """The shard's work from the cost model (FLOPs): a slow or lying peer cannot change it."""
        if self.work is not None:
            return int(self.work(shard.payload))
        return 1
