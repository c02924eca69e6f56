"""A Pool executes a Job's shards on Dask workers, verifies each result, mints receipts, and reduces on workers.

Why Dask: its scheduler, transport and workers are the engine (an in-process `LocalCluster` for a Pool of
one, local processes for `workers=N`, any cluster by address); what it cannot know is whether a peer told
the truth, so acceptance, quarantine and receipts are ours. The client judges each result (re-execution,
spot-check, quorum, Freivalds) and only accepted futures enter the tree reduction, whose steps are
`client.submit` calls on workers: the scheduler never sums anything.
"""
from __future__ import annotations

import itertools
import logging
import math
import os
import secrets
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..catalog import get as catalog_get
from ..errors import PoolError, PoolUnreachable, RejectedResult, ScellisError
from .checks import agree, freivalds, spot_pick
from .datashard import DataProgram, open_result, run_data_shard, shard_header
from .governor import Governor
from .job import Job, Shard, content_hash
from .keys import load_public
from .ledger import Ledger, Receipt
from .tree import pairwise
from .trust import admit, check_regime, check_security


def _execute(fn: Callable, payload: Any, params: dict) -> Any:
    """What a worker runs for one shard."""
    return fn(payload, **params)


def _execute_stamped(fn: Callable, payload: Any, params: dict, stamp: str) -> dict:
    """What a worker of an own pool runs for one shard attempt: the value, stamped with the attempt it answers."""
    return {"stamp": stamp, "value": fn(payload, **params)}


def _opened(answer: Any, sent: dict | None) -> Any:
    """The value inside an answer (an own pool's stamped dict, or a data shard's answer bytes)."""
    if sent is not None:
        return open_result(answer, sent)
    return answer["value"]


def _reduce(name: str, op: str, *args):
    """One step of a reduction on a worker: the reducer is looked up there by catalog name."""
    r = catalog_get("reducer", name).make()
    return getattr(r, op)(*args)


def _leaf(name: str, index: int, answer: Any, sent: dict | None):
    """A reduction's leaf on the worker holding the accepted answer: opened there, no trip to the client."""
    return catalog_get("reducer", name).make().leaf(index, _opened(answer, sent))


def _noop() -> None:
    return None


class _Resting(Exception):
    """No peer may take a shard now only because each is within its rest (Governor.max_time)."""


_REAL = object()          # an attempt's "known answer" when it is a real shard, not a canary


def _answer(answer: Any, stamp: str, sent: dict | None) -> Any:
    """The value of an answer to the attempt stamped `stamp`; RejectedResult if stale or malformed."""
    if sent is not None:
        return open_result(answer, sent)
    if not isinstance(answer, dict) or set(answer) != {"stamp", "value"}:
        raise RejectedResult("the answer is not a stamped result", where="Pool.run", hint="the peer is broken")
    if answer["stamp"] != stamp:
        raise RejectedResult(f"stale: the answer is for attempt {str(answer['stamp'])[:16]}, not the one asked "
                             f"({stamp[:16]})", where="Pool.run", hint="an old answer replayed", stale=True)
    return answer["value"]


def _local_reduce(name: str, values: dict) -> Any:
    """The reduction the workers make, made on the client in the same pairwise order (so bit-identical)."""
    r = catalog_get("reducer", name).make()
    return r.finish(pairwise([r.leaf(i, values[i]) for i in sorted(values)], r.combine))


def reducer_hash(name: str) -> str:
    """The content hash of this process's catalog reducer `name`: BLAKE3 over its name and source text (a
    string: a peer that is not ours sends back only plain messages)."""
    import inspect

    import blake3
    obj = catalog_get("reducer", name).obj
    try:
        src = inspect.getsource(obj)
    except (OSError, TypeError):          # defined where no source is kept: named by module and qualified name
        src = f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', repr(obj))}"
    return blake3.blake3(f"reducer\0{name}\0{src}".encode()).hexdigest()


def _reduce_digest(name: str, acc: Any) -> str:
    """The last step of a reduction on a worker of a pool that is not ours: only its content hash comes back
    (a string: the client deserializes nothing a stranger made but bytes and plain messages)."""
    return content_hash(catalog_get("reducer", name).make().finish(acc))


@dataclass
class JobResult:
    """What `Pool.run` returns: the reduced value, the receipts minted, and what verification rejected."""

    job: str
    value: Any
    receipts: list = field(default_factory=list)
    rejected: list = field(default_factory=list)      # (shard index, peer, reason); index -1: a canary
    checked: int = 0                                    # shards whose result was independently checked
    canaries: int = 0                                   # canary shards planted (never reduced, no receipt)
    revoked: list = field(default_factory=list)         # shard indices re-run because their peer failed a canary
    ledger: dict | None = None                          # the receipt ledger's signer and head after this job

    def __repr__(self) -> str:
        return (f"JobResult(job={self.job[:12]}, shards={len(self.receipts)}, rejected={len(self.rejected)}, "
                f"checked={self.checked})")


def _check_timeout(timeout: Any) -> None:
    """A join timeout is a positive, finite number of seconds: Dask fails on nan or inf with a KeyError about
    time units, and a negative or zero one can only fail."""
    try:
        t = float(timeout)
    except (TypeError, ValueError):
        t = math.nan
    if isinstance(timeout, bool) or not (math.isfinite(t) and t > 0):
        raise PoolError(f"timeout={timeout!r} is not a positive, finite number of seconds", where="Pool",
                        hint="give the seconds to wait for the cluster's address to answer, e.g. timeout=10")


class Pool:
    """`Pool()`: one in-process worker, no network. `Pool(workers=N)`: N local worker processes
    (`processes=False` keeps them in-process). `Pool(address="tcp://host:8786")`: join a running cluster,
    refusing in `timeout` seconds if it does not answer. `ledger` (a path or Ledger) receives receipts;
    `ledger_key` (the signer's public key, hex) pins it in the pool's configuration: a ledger signed by any other
    key, or failing its checks, is refused before the pool starts.

    `trust` is "own" (default), "consortium" (TLS with certificates: `security=distributed.Security(...)`) or
    "open"; pool/trust.py says what each refuses. `governor` (pool/governor.py) caps each peer's share;
    `stop(peer)` stops giving a peer work, mid-job included.
    """

    def __init__(self, workers: int | None = None, *, address: str | None = None, processes: bool | None = None,
                 threads_per_worker: int = 1, timeout: float = 10.0, ledger: "str | os.PathLike | Ledger | None" = None,
                 trust: str = "own", security: Any = None, governor: Governor | None = None,
                 ledger_key: str | None = None):
        _check_timeout(timeout)                        # before Dask, whose error for nan/inf is a KeyError
        self.ledger = ledger if isinstance(ledger, Ledger) or ledger is None else Ledger(ledger)
        self.ledger_key = ledger_key
        if ledger_key is not None:
            if self.ledger is None:
                raise PoolError("ledger_key= pins the signer of a ledger, but no ledger= was given", where="Pool",
                                hint="give ledger=PATH with it")
            self.ledger.verify(public_key=load_public(ledger_key))
        from distributed import Client, LocalCluster   # dask.distributed: ~0.5 s to import, only when a pool starts
        self.trust = check_regime(trust)
        check_security(trust, security, address)
        self.security = security
        self.governor = governor or Governor()
        self.cluster = None
        self.quarantined: set[str] = set()
        if address is not None:
            if workers is not None:
                raise PoolError("give workers= or address=, not both", where="Pool",
                                hint="a joined cluster's workers are its own")
            try:
                self.client = self._client_class(Client)(address, timeout=timeout, set_as_default=False,
                                                         security=security, **self._deserializers())
            except (OSError, TimeoutError, ValueError, TypeError) as e:
                tls = " (TLS: check the certificates and the CA)" if address.startswith("tls://") else ""
                raise PoolUnreachable(f"no Dask scheduler answered at {address} within {timeout:g} s{tls}",
                                      where="Pool", hint="start one (`dask scheduler`) or check the address and "
                                      "firewall; sc.Pool() runs in-process with no network", cause=str(e)) from None
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
            tls = {"protocol": "tls://", "security": security} if security is not None else {}
            try:
                with dask.config.set({"distributed.scheduler.work-stealing": False}):
                    self.cluster = LocalCluster(n_workers=n, processes=procs, threads_per_worker=threads_per_worker,
                                                dashboard_address=None, silence_logs=logging.ERROR,
                                                # Dask's scheduler always serves HTTP (health, metrics): loopback
                                                # only, any free port, so a Pool never collides with another
                                                scheduler_kwargs={"dashboard_address": "127.0.0.1:0"}, **tls)
            except RuntimeError as e:
                script = procs and getattr(main, "__file__", None) and sys.argv and sys.argv[0] != "-c"
                raise PoolError(f"the pool's {n} worker process(es) did not start", where="Pool",
                                hint=("worker processes start by re-importing your script: put the code that makes "
                                      "the Pool under `if __name__ == \"__main__\":`" if script else
                                      "see the worker's log above; sc.Pool() runs in-process without processes"),
                                cause=str(e)) from None
            self.client = self._client_class(Client)(self.cluster, set_as_default=False, security=security,
                                                     **self._deserializers())

    def _deserializers(self) -> dict:
        """A pool that is not ours sends back only bytes and plain messages: the client unpickles none of
        its results (Dask's msgpack only; a pickled object from a peer fails to load and counts as a lie)."""
        return {} if self.trust == "own" else {"deserializers": ["msgpack"]}

    def _client_class(self, client_cls: type) -> type:
        """An own pool's Client, or for a pool that is not ours one that loads no error a peer sends: Dask
        unpickles a task's exception as it arrives, and a hostile peer's pickle would run on this machine."""
        if self.trust == "own":
            return client_cls

        class StrangerClient(client_cls):
            def _handle_task_erred(self, key=None, exception=None, traceback=None):
                super()._handle_task_erred(key=key, exception="a peer's error, not loaded (a pool that is not ours "
                                           "gets no pickle onto the client)", traceback=None)
        return StrangerClient

    # ---- the pool -----------------------------------------------------------------------------------
    def workers(self) -> list[str]:
        """Addresses of the workers not quarantined, in a stable order (asked of the scheduler each time:
        `scheduler_info()` is a cached copy that can lag, even read empty, while workers start or leave)."""
        return sorted(a for a in self.client.nthreads() if a not in self.quarantined)

    def stop(self, peer: str) -> None:
        """Stop giving `peer` work (on its owner's demand); a running job re-runs its queued shards elsewhere."""
        self.governor.stop(peer)

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
        return (f"Pool({kind}, trust={self.trust}, workers={len(self.workers())}, "
                f"quarantined={len(self.quarantined)})")

    # ---- running a job --------------------------------------------------------------------------------
    def run(self, job: Job, *, on_shard: Callable[[int, Any], None] | None = None) -> JobResult:
        """Execute every shard, accept only verified results, mint receipts, reduce on workers.

        Each attempt carries a fresh CSPRNG stamp that its answer must echo (a replayed answer is stale and
        rejected). `job.canaries` shards with known answers per peer are mixed in at CSPRNG-chosen places; a
        peer that fails one is quarantined and every result it gave this job is re-run elsewhere, so receipts
        are minted once the job's results are final, one per shard.
        """
        from distributed import as_completed           # dask.distributed (see __init__)
        admit(job, self.trust)                         # a refusal comes before anything is sent
        shards = job.shards()
        data = isinstance(job.fn, DataProgram)
        res = JobResult(job.hash, None)
        attempts: dict[str, tuple] = {}     # attempt id -> (shard, [(worker, future, stamp, sent)], known answer)
        placed: dict[str, float] = {}       # attempt id -> when it was placed (for Governor.max_time)
        later: list[tuple] = []             # (shard, known, only) waiting for a resting peer
        accepted: dict[int, tuple] = {}     # shard index -> (worker, future, value, method, sent)
        units = {s.index: job.work_units(s) for s in shards}
        gov = self.governor
        gov.start_job(sum(units.values()))
        stopped = set(gov.stopped)
        rr = itertools.count()
        ac = as_completed(loop=self.client.loop)

        def place(shard: Shard, need: int, only: str | None) -> list[str]:
            free = [w for w in self.workers() if only is None or w == only]   # quarantined peers are not in it
            ok = gov.eligible(free, units[shard.index])
            if len(ok) >= need:
                start = next(rr)
                return [ok[(start + i) % len(ok)] for i in range(need)]
            if len(free) >= need and gov.resting(free, units[shard.index]) is not None:
                raise _Resting()
            if len(free) >= need:
                raise PoolError(f"shard {shard.index} of job {job.hash[:12]} needs {units[shard.index]} work units "
                                f"on {need} peer(s), and no peer's budget has them", where="Pool.run",
                                code="pool-budget", hint="raise the governor's max_work or max_share, or add peers",
                                shard=shard.index, budgets=gov.report())
            raise RejectedResult(f"shard {shard.index} of job {job.hash[:12]} has no {need} trustworthy "
                                 f"worker(s) left to run on ({len(self.quarantined)} quarantined)",
                                 where="Pool.run", hint="add workers, or look at the quarantined peers' results",
                                 shard=shard.index, quarantined=sorted(self.quarantined))

        def submit(shard: Shard, known: Any = _REAL, only: str | None = None) -> None:
            need = job.replicas if job.verify == "quorum" and known is _REAL else 1
            try:
                chosen = place(shard, need, only)
            except _Resting:                           # every peer is resting (its time share): later
                later.append((shard, known, only))
                return
            aid = secrets.token_hex(12)                # opaque: a peer cannot tell a canary from a shard
            futs = []
            for j, w in enumerate(chosen):
                stamp = secrets.token_hex(16)
                if data:
                    blob = job.fn.encode(shard.payload, job.params, stamp)
                    args, sent = (run_data_shard, blob), shard_header(blob)
                else:
                    args, sent = (_execute_stamped, job.fn, shard.payload, job.params, stamp), None
                # a preference, not a pin: a worker that leaves mid-job has its shards run elsewhere (the
                # receipt names the worker that held the result, not the one asked)
                f = self.client.submit(*args, workers=[w], allow_other_workers=True, pure=False,
                                       key=f"shard-{aid}-{j}")
                gov.charge(w, units[shard.index])
                futs.append((w, f, stamp, sent))
                ac.add(f)
            attempts[aid] = (shard, futs, known)
            placed[aid] = time.monotonic()

        def retry() -> float | None:
            """Place the shards that waited for a resting peer; seconds until the next may be placed."""
            todo = list(later)
            later.clear()
            for item in todo:
                submit(*item)
            if not later:
                return None
            return gov.resting(self.workers(), units[later[0][0].index]) or 0.05

        def back(aid: str, futs: list) -> None:          # an attempt's peers are done with it: their busy time
            t = placed.pop(aid, None)
            if t is not None:
                for w, x, _, _ in futs:
                    if x.done():
                        gov.finished(w, time.monotonic() - t)

        def revoke(peer: str) -> None:
            for idx in [i for i, a in accepted.items() if a[0] == peer]:
                accepted.pop(idx)
                res.revoked.append(idx)
                submit(shards[idx])

        def restop() -> None:                          # peers stopped on demand since the last look
            for peer in set(gov.stopped) - stopped:
                stopped.add(peer)
                for aid, (shard, futs, known) in list(attempts.items()):
                    if any(w == peer and not x.done() for w, x, _, _ in futs):
                        attempts.pop(aid)
                        back(aid, futs)
                        unrun = [w for w, x, _, _ in futs if not x.done()]
                        self.client.cancel([x for _, x, _, _ in futs])
                        for w in unrun:
                            gov.refund(w, units[shard.index])
                        if known is _REAL:
                            submit(shard)

        order: list[tuple] = [(s, _REAL, None) for s in shards]
        if job.canaries:
            ref = job.reference or job.fn
            for w in gov.eligible(self.workers(), 0):
                for _ in range(job.canaries):
                    src = shards[secrets.randbelow(len(shards))]
                    order.insert(secrets.randbelow(len(order) + 1), (src, ref(src.payload, **job.params), w))
                    res.canaries += 1

        def wake() -> None:
            ac.add(self.client.submit(_noop, pure=False, key=f"wake-{secrets.token_hex(8)}"))

        def completed():                               # every attempt's answer, and the rested peers' turns
            while True:
                yield from ac
                wait = retry()
                if wait is None and not later:
                    return
                time.sleep(min(wait or 0.05, 1.0))

        gov._wake = wake
        try:
            for s, known, only in order:
                submit(s, known, only)
            for f in completed():
                restop()
                if later:
                    wait = retry()
                    if wait is not None:
                        threading.Timer(min(wait, 1.0), lambda: gov._wake and gov._wake()).start()
                aid = f.key.split("-")[1] if isinstance(f.key, str) and f.key.startswith("shard-") else None
                if aid not in attempts:
                    continue
                shard, futs, known = attempts[aid]
                if not all(x.done() for _, x, _, _ in futs):
                    continue
                attempts.pop(aid)
                back(aid, futs)
                results, raised = [], []
                for w, x, stamp, sent in futs:
                    try:
                        answer = x.result()
                        w = (self.client.who_has([x]).get(x.key) or [w])[0]     # where it actually ran
                    except ScellisError:
                        if self.trust == "own":
                            raise
                        raised.append((w, f"raised {str(sys.exc_info()[1])[:300]}"))  # a peer's error: a lie
                        continue
                    except Exception as e:
                        if job.verify == "none":
                            raise PoolError(f"shard {shard.index} failed on {w}: {type(e).__name__}: {e}",
                                            where="Pool.run", hint="fix the job's function") from e
                        # under verification a peer that raises is treated as one that lied: re-run elsewhere
                        raised.append((w, f"raised {type(e).__name__}: {e}"))
                        continue
                    if w in self.quarantined:                 # caught lying since: its answer is not judged
                        raised.append((w, None))
                        continue
                    try:
                        results.append((w, x, _answer(answer, stamp, sent)))
                    except RejectedResult as e:                              # stale, malformed, wrong shape
                        raised.append((w, e.diagnostic.message))
                if any(reason is None for _, reason in raised):          # from a peer quarantined meanwhile
                    if known is _REAL:
                        submit(shard)
                    continue
                if known is not _REAL:                                       # a canary: judged, never reduced
                    for w, value in [(r[0], r[2]) for r in results]:
                        if not agree(value, known, job.tolerance):
                            raised.append((w, "differs from the canary's known answer"))
                    for w, reason in raised:
                        res.rejected.append((-1, w, f"canary: {reason}"))
                        if w not in self.quarantined:
                            self.quarantined.add(w)
                            revoke(w)
                    continue
                if raised:
                    good, bad, method, checked = None, raised, job.verify, 0
                elif len({r[0] for r in results}) < len(results):     # replicas landed on one peer: not a quorum
                    submit(shard)
                    continue
                else:
                    good, bad, method, checked = self._judge(job, shard, results)
                res.checked += checked
                for w, reason in bad:
                    if w not in self.quarantined:
                        self.quarantined.add(w)
                        revoke(w)
                    res.rejected.append((shard.index, w, reason))
                if good is None:
                    submit(shard)
                    continue
                w, fut, value = good
                sent = next(s for _, x, _, s in futs if x is fut)
                accepted[shard.index] = (w, fut, value, method, sent)
                if on_shard is not None:
                    on_shard(shard.index, value)
        finally:                                       # a failed job leaves nothing running
            gov._wake = None
            for _, futs, _ in attempts.values():
                self.client.cancel([x for _, x, _, _ in futs])
        if self.ledger is not None:                    # final results only: one receipt per shard
            for idx in sorted(accepted):
                w, _, value, method, _ = accepted[idx]
                res.receipts.append(self.ledger.mint(job=job.hash, shard=shards[idx].hash, peer=w,
                                                     result=content_hash(value), method=method,
                                                     work_units=units[idx]))
            res.ledger = self.ledger.head()
        if self.trust == "own":
            res.value = self._tree_reduce(job.reduction, {i: (a[1], a[4]) for i, a in accepted.items()})
            return res
        # a stranger's reduction is one more result to check: first each worker's reducer against the client's
        # catalog entry by content hash (a peer with another version of it is named, and the client reduces
        # alone), then the workers' tree against the client's own
        mine = reducer_hash(job.reduction)
        asked = {w: self.client.submit(reducer_hash, job.reduction, workers=[w], allow_other_workers=False,
                                       pure=False) for w in self.workers()}
        differ = []
        for w, f in asked.items():
            try:
                theirs = f.result()
            except Exception:                  # a peer's error (not loaded) or a reducer it lacks: not the same
                theirs = None
            if theirs != mine:
                differ.append(w)
                why = (f"its reducer {job.reduction!r} is not the client's catalog entry "
                       f"(content hash {str(theirs)[:16]}, not {mine[:16]})")
                res.rejected.append((-1, w, why))
        if differ:
            try:
                res.value = _local_reduce(job.reduction, {i: a[2] for i, a in accepted.items()})
            except Exception as e:
                raise PoolError(f"reduction {job.reduction!r} cannot combine these shard results: "
                                f"{type(e).__name__}: {e}", where="Pool.run",
                                hint="declare a reduction that matches what the shards return") from None
            return res
        digest = self._tree_reduce(job.reduction, {i: (a[1], a[4]) for i, a in accepted.items()}, digest=True)
        try:
            res.value = _local_reduce(job.reduction, {i: a[2] for i, a in accepted.items()})
        except Exception as e:
            raise PoolError(f"reduction {job.reduction!r} cannot combine these shard results: {type(e).__name__}: "
                            f"{e}", where="Pool.run", hint="declare a reduction that matches what the shards return")
        if digest != content_hash(res.value):
            res.rejected.append((-1, "reduction", "the workers' reduction differs from the client's"))
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

    def _tree_reduce(self, name: str, accepted: dict, digest: bool = False) -> Any:
        """Pairwise combination of the accepted results on workers (depth log2(n)); only the result comes back."""
        top = pairwise([self.client.submit(_leaf, name, i, *accepted[i], pure=False) for i in sorted(accepted)],
                       lambda a, b: self.client.submit(_reduce, name, "combine", a, b, pure=False))
        try:
            if digest:
                return self.client.submit(_reduce_digest, name, top, pure=False).result()
            return self.client.submit(_reduce, name, "finish", top, pure=False).result()
        except ScellisError:
            raise
        except Exception as e:
            raise PoolError(f"reduction {name!r} cannot combine these shard results: {type(e).__name__}: {e}",
                            where="Pool.run", hint="declare a reduction that matches what the shards return") from e
