"""A Pool executes a Job's shards on Dask workers, verifies each result, mints receipts, and reduces on workers.

Why Dask: its scheduler, transport and workers are the engine (an in-process `LocalCluster` for a Pool of
one, local processes for `workers=N`, any cluster by address); what it cannot know is whether a peer told
the truth, so acceptance, quarantine and receipts are ours. The client judges each result (re-execution,
spot-check, quorum, Freivalds) and only accepted futures enter the tree reduction, whose steps are
`client.submit` calls on workers: the scheduler never sums anything.
"""
from __future__ import annotations

import sys

import itertools
import logging
import os
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from ..catalog import get as catalog_get
from ..errors import PoolError, PoolUnreachable, RejectedResult, ScellisError
from .checks import agree, freivalds, spot_pick
from .job import Job, Shard, content_hash
from .ledger import Ledger, Receipt


def _execute(fn: Callable, payload: Any, params: dict) -> Any:
    """What a worker runs for one shard."""
    return fn(payload, **params)


def _reduce(name: str, op: str, *args):
    """One step of a reduction on a worker: the reducer is looked up there by catalog name."""
    r = catalog_get("reducer", name).make()
    return getattr(r, op)(*args)


@dataclass
class JobResult:
    """What `Pool.run` returns: the reduced value, the receipts minted, and what verification rejected."""

    job: str
    value: Any
    receipts: list = field(default_factory=list)
    rejected: list = field(default_factory=list)      # (shard index, peer, reason)
    checked: int = 0                                    # shards whose result was independently checked

    def __repr__(self) -> str:
        return (f"JobResult(job={self.job[:12]}, shards={len(self.receipts)}, rejected={len(self.rejected)}, "
                f"checked={self.checked})")


class Pool:
    """`Pool()`: one in-process worker, no network. `Pool(workers=N)`: N local worker processes
    (`processes=False` keeps them in-process). `Pool(address="tcp://host:8786")`: join a running cluster,
    refusing in `timeout` seconds if it does not answer. `ledger` (a path or Ledger) receives receipts.
    """

    def __init__(self, workers: int | None = None, *, address: str | None = None, processes: bool | None = None,
                 threads_per_worker: int = 1, timeout: float = 10.0, ledger: "str | os.PathLike | Ledger | None" = None):
        from distributed import Client, LocalCluster   # dask.distributed: ~0.5 s to import, only when a pool starts
        self.cluster = None
        self.quarantined: set[str] = set()
        if address is not None:
            if workers is not None:
                raise PoolError("give workers= or address=, not both", where="Pool",
                                hint="a joined cluster's workers are its own")
            try:
                self.client = Client(address, timeout=timeout, set_as_default=False)
            except (OSError, TimeoutError, ValueError) as e:
                raise PoolUnreachable(f"no Dask scheduler answered at {address} within {timeout:g} s", where="Pool",
                                      hint="start one (`dask scheduler`) or check the address and firewall; "
                                           "sc.Pool() runs in-process with no network", cause=str(e)) from None
        else:
            n = 1 if workers is None else int(workers)
            if n < 1:
                raise PoolError(f"a pool needs at least one worker, got workers={workers}", where="Pool",
                                hint="give workers=1 or more")
            procs = (workers is not None) if processes is None else bool(processes)
            main = sys.modules.get("__main__")
            if procs and main is not None and not hasattr(main, "__spec__"):
                main.__spec__ = None   # multiprocessing's spawn reads it; an exec'd or embedded __main__ may lack it
            import dask      # dask: no work stealing, so a shard runs where it was sent unless that worker leaves
            with dask.config.set({"distributed.scheduler.work-stealing": False}):
                self.cluster = LocalCluster(n_workers=n, processes=procs, threads_per_worker=threads_per_worker,
                                            dashboard_address=None, silence_logs=logging.ERROR,
                                            # Dask's scheduler always serves HTTP (health, metrics): loopback
                                            # only, any free port, so a Pool never collides with another
                                            scheduler_kwargs={"dashboard_address": "127.0.0.1:0"})
            self.client = Client(self.cluster, set_as_default=False)
        self.ledger = ledger if isinstance(ledger, Ledger) or ledger is None else Ledger(ledger)

    # ---- the pool -----------------------------------------------------------------------------------
    def workers(self) -> list[str]:
        """Addresses of the workers not quarantined, in a stable order."""
        return sorted(a for a in self.client.scheduler_info()["workers"] if a not in self.quarantined)

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()

    def __repr__(self) -> str:
        kind = "joined" if self.cluster is None else "local"
        return f"Pool({kind}, workers={len(self.workers())}, quarantined={len(self.quarantined)})"

    # ---- running a job --------------------------------------------------------------------------------
    def run(self, job: Job, *, on_shard: Callable[[int, Any], None] | None = None) -> JobResult:
        """Execute every shard, accept only verified results, mint receipts, reduce on workers."""
        from distributed import as_completed           # dask.distributed (see __init__)
        shards = job.shards()
        res = JobResult(job.hash, None)
        attempts: dict[str, tuple[Shard, list]] = {}   # attempt id -> (shard, [(worker, future)])
        accepted: dict[int, Any] = {}
        rr = itertools.count()
        ac = as_completed(loop=self.client.loop)

        def submit(shard: Shard) -> None:
            free = self.workers()            # a rejected peer is quarantined, so a re-run goes elsewhere
            need = job.replicas if job.verify == "quorum" else 1
            if len(free) < need:
                raise RejectedResult(f"shard {shard.index} of job {job.hash[:12]} has no {need} trustworthy "
                                     f"worker(s) left to run on ({len(self.quarantined)} quarantined)",
                                     where="Pool.run", hint="add workers, or look at the quarantined peers' results",
                                     shard=shard.index, quarantined=sorted(self.quarantined))
            start = next(rr)
            chosen = [free[(start + i) % len(free)] for i in range(need)]
            aid = uuid.uuid4().hex
            futs = []
            for w in chosen:
                # a preference, not a pin: a worker that leaves mid-job has its shards run elsewhere (the
                # receipt names the worker that held the result, not the one asked)
                f = self.client.submit(_execute, job.fn, shard.payload, job.params, workers=[w],
                                       allow_other_workers=True, pure=False, key=f"shard-{shard.index}-{aid}-{w}")
                futs.append((w, f))
                ac.add(f)
            attempts[aid] = (shard, futs)

        try:
            for s in shards:
                submit(s)
            for f in ac:
                aid = f.key.split("-")[2]
                if aid not in attempts:
                    continue
                shard, futs = attempts[aid]
                if not all(x.done() for _, x in futs):
                    continue
                attempts.pop(aid)
                results, raised = [], []
                for w, x in futs:
                    try:
                        value = x.result()
                        w = (self.client.who_has([x]).get(x.key) or [w])[0]     # where it actually ran
                        results.append((w, x, value))
                    except ScellisError:
                        raise
                    except Exception as e:
                        if job.verify == "none":
                            raise PoolError(f"shard {shard.index} failed on {w}: {type(e).__name__}: {e}",
                                            where="Pool.run", hint="fix the job's function") from e
                        # under verification a peer that raises is treated as one that lied: re-run elsewhere
                        raised.append((w, f"raised {type(e).__name__}: {e}"))
                if raised:
                    good, bad, method, checked = None, raised, job.verify, 0
                elif len({r[0] for r in results}) < len(results):     # replicas landed on one peer: not a quorum
                    submit(shard)
                    continue
                else:
                    good, bad, method, checked = self._judge(job, shard, results)
                res.checked += checked
                for w, reason in bad:
                    self.quarantined.add(w)
                    res.rejected.append((shard.index, w, reason))
                if good is None:
                    submit(shard)
                    continue
                w, fut, value = good
                accepted[shard.index] = fut
                if self.ledger is not None:
                    res.receipts.append(self.ledger.mint(job=job.hash, shard=shard.hash, peer=w,
                                                         result=content_hash(value), method=method,
                                                         work_units=job.work_units(shard)))
                if on_shard is not None:
                    on_shard(shard.index, value)
        finally:                                       # a failed job leaves nothing running
            for _, futs in attempts.values():
                self.client.cancel([x for _, x in futs])
        res.value = self._tree_reduce(job.reduction, accepted)
        return res

    def _judge(self, job: Job, shard: Shard, results: list) -> tuple:
        """(accepted (worker, future, value) or None, [(worker, reason)] rejected, method, checked 0/1)."""
        tol = job.tolerance

        def reference():
            return (job.reference or job.fn)(shard.payload, **job.params)

        if job.verify == "none":
            return results[0], [], "none", 0
        if job.verify in ("reference", "spot"):
            w, fut, value = results[0]
            if job.verify == "spot" and not spot_pick(job.fraction):
                return results[0], [], "spot:unchecked", 0
            method = "reference" if job.verify == "reference" else "spot:checked"
            if agree(value, reference(), tol):
                return results[0], [], method, 1
            return None, [(w, "differs from the reference re-execution")], method, 1
        if job.verify == "freivalds":
            w, fut, value = results[0]
            p = shard.payload
            if freivalds(p["a"], p["b"], value, job.rounds, tol):
                return results[0], [], f"freivalds:{job.rounds}", 1
            return None, [(w, f"fails Freivalds' check ({job.rounds} rounds)")], f"freivalds:{job.rounds}", 1
        # quorum: every replica must agree; on a split the reference path decides who lied
        first = results[0][2]
        if all(agree(v, first, tol) for _, _, v in results[1:]):
            return results[0], [], f"quorum:{len(results)}", 1
        ref = reference()
        honest = [r for r in results if agree(r[2], ref, tol)]
        bad = [(w, "disagrees with its quorum and the reference") for w, _, v in results if not agree(v, ref, tol)]
        return (honest[0] if honest else None), bad, f"quorum:{len(results)}", 1

    def _tree_reduce(self, name: str, accepted: dict) -> Any:
        """Pairwise combination of the accepted results on workers (depth log2(n)); only the result comes back."""
        level = [self.client.submit(_reduce, name, "leaf", i, accepted[i], pure=False) for i in sorted(accepted)]
        while len(level) > 1:
            nxt = [self.client.submit(_reduce, name, "combine", a, b, pure=False)
                   for a, b in zip(level[0::2], level[1::2])]
            if len(level) % 2:
                nxt.append(level[-1])
            level = nxt
        try:
            return self.client.submit(_reduce, name, "finish", level[0], pure=False).result()
        except ScellisError:
            raise
        except Exception as e:
            raise PoolError(f"reduction {name!r} cannot combine these shard results: {type(e).__name__}: {e}",
                            where="Pool.run", hint="declare a reduction that matches what the shards return") from e
