"""The per-peer budget governor: how much of a Pool's work one peer may take, and stop on demand.

Why ours: Dask spreads tasks over whoever is there; a volunteer lends a bounded share. Budgets are in the
cost model's work units (the planner's FLOPs and bytes, never the clock, as receipts are): `max_work` caps
what a peer takes over the Pool's life (a number, or {peer address: number}), `max_share` caps the fraction
of one Job's work a single peer takes, `max_time` caps the share of a Job's wall-clock time a peer spends
on its shards (a volunteer lending half its machine: 0.5; such a peer takes one shard at a time and rests
between shards until its busy time is back under the share). `stop(peer)` takes effect at once: the peer gets no new shard, every
shard of it not finished yet is cancelled, refunded and run elsewhere; what it already delivered stays. The Pool consults `eligible`
whenever it places a shard and `charge`s the peer it placed it on.
"""
from __future__ import annotations

import threading
import time
from collections import defaultdict

from ..errors import PoolError


class Governor:
    def __init__(self, max_work: "int | dict[str, int] | None" = None, max_share: float | None = None,
                 max_time: float | None = None):
        if max_share is not None and not 0.0 < max_share <= 1.0:
            raise PoolError(f"max_share={max_share} is not in (0, 1]", where="Governor",
                            hint="give e.g. max_share=0.5 for at most half of each job per peer")
        if max_time is not None and not 0.0 < max_time <= 1.0:
            raise PoolError(f"max_time={max_time} is not in (0, 1]", where="Governor",
                            hint="give e.g. max_time=0.5 for at most half of each peer's time")
        self.max_time = max_time
        self.busy: dict[str, float] = defaultdict(float)       # seconds each peer spent on the current job's shards
        self.inflight: dict[str, int] = defaultdict(int)       # shards placed on each peer, not finished
        self.t0 = time.monotonic()
        if isinstance(max_work, dict):
            bad = {k: v for k, v in max_work.items() if v < 0}
        else:
            bad = {"*": max_work} if max_work is not None and max_work < 0 else {}
        if bad:
            raise PoolError(f"negative work budgets {bad}", where="Governor", hint="budgets are work units >= 0")
        self.max_work, self.max_share = max_work, max_share
        self.spent: dict[str, int] = defaultdict(int)          # work units placed on each peer, Pool lifetime
        self.job_spent: dict[str, int] = defaultdict(int)      # ... in the current job
        self.job_total = 0
        self.stopped: set[str] = set()
        self._lock = threading.Lock()
        self._wake = None                                      # the running job's nudge (set by Pool.run)

    def budget(self, peer: str) -> float:
        if self.max_work is None:
            return float("inf")
        if isinstance(self.max_work, dict):
            return float(self.max_work.get(peer, float("inf")))
        return float(self.max_work)

    def start_job(self, total: int) -> None:
        with self._lock:
            self.job_spent.clear()
            self.job_total = int(total)
            self.busy.clear()
            self.inflight.clear()
            self.t0 = time.monotonic()

    def _rested(self, p: str, now: float) -> bool:
        """Under `max_time`: the peer is idle and its busy time is within its share of the job's time so far."""
        return self.inflight[p] == 0 and self.busy[p] <= self.max_time * (now - self.t0) + 1e-9

    def resting(self, peers: list[str], units: int) -> float | None:
        """Seconds until one of `peers` that only the time share holds back may take a shard; None if none is
        held back by time alone (no max_time, or every peer is stopped or out of work budget)."""
        if self.max_time is None:
            return None
        with self._lock:
            now = time.monotonic()
            waits = []
            for p in peers:
                if p in self.stopped or self.spent[p] + units > self.budget(p):
                    continue
                if self.inflight[p]:
                    waits.append(0.05)                           # finishing a shard: look again soon
                else:
                    waits.append(max(0.0, self.t0 + self.busy[p] / self.max_time - now))
            return min(waits) if waits else None

    def finished(self, peer: str, seconds: float) -> None:
        """A shard placed on `peer` came back after `seconds` (placed on an idle peer: its busy time)."""
        with self._lock:
            self.inflight[peer] = max(0, self.inflight[peer] - 1)
            self.busy[peer] += max(0.0, float(seconds))

    def eligible(self, peers: list[str], units: int) -> list[str]:
        """The peers that may take a shard of `units` work units now."""
        with self._lock:
            now = time.monotonic()
            out = []
            for p in peers:
                if p in self.stopped or self.spent[p] + units > self.budget(p):
                    continue
                if self.max_share is not None and self.job_total and \
                        self.job_spent[p] + units > self.max_share * self.job_total + 1e-9:
                    continue
                if self.max_time is not None and not self._rested(p, now):
                    continue
                out.append(p)
            return out

    def charge(self, peer: str, units: int) -> None:
        with self._lock:
            self.spent[peer] += int(units)
            self.job_spent[peer] += int(units)
            self.inflight[peer] += 1

    def refund(self, peer: str, units: int) -> None:
        """A shard placed on `peer` that it never ran (stopped before it started)."""
        with self._lock:
            self.spent[peer] -= int(units)
            self.job_spent[peer] -= int(units)
            self.inflight[peer] = max(0, self.inflight[peer] - 1)

    def stop(self, peer: str) -> None:
        """The peer takes no more shards; a running job moves its queued ones elsewhere."""
        with self._lock:
            self.stopped.add(peer)
            wake = self._wake
        if wake is not None:
            wake()

    def resume(self, peer: str) -> None:
        with self._lock:
            self.stopped.discard(peer)

    def report(self) -> dict:
        with self._lock:
            out = {p: {"work_units": int(u), "budget": self.budget(p), "stopped": p in self.stopped}
                   for p, u in sorted(self.spent.items())}
            if self.max_time is not None:          # one shard at a time: placement to answer is busy time
                for p, d in out.items():
                    d["busy_s"] = round(self.busy.get(p, 0.0), 4)
            return out
