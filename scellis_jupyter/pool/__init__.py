"""Pools: a content-addressed Job cut into Shards by a Partitioner, run on Dask workers, every result
verified before acceptance, receipts in a signed hash-chained ledger, reductions on workers. Stands on `run`.
Trust regimes (own, consortium, open) in trust.py; shards that travel as data in datashard.py; the per-peer
budget governor in governor.py.
"""
from __future__ import annotations

from .checks import false_accept_bound, freivalds
from .datashard import DataProgram
from .governor import Governor
from .job import Job, Shard, content_hash
from .ledger import Ledger, Receipt
from .pool import JobResult, Pool

__all__ = ["Pool", "Job", "Shard", "JobResult", "Ledger", "Receipt", "content_hash", "freivalds",
           "false_accept_bound", "DataProgram", "Governor"]
