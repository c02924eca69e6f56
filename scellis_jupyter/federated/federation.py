"""A Federation: a Pool whose workers are sites that keep their data, and rounds of a catalog strategy.

Why on the Pool: a site is a Dask worker of the same Pool (in-process for a Pool of one, local processes,
or a cluster by address); its rows are loaded there by its own loader and pinned there (`site.py`), and
only the strategy's vectors travel. A round: the server model goes to every site; each trains locally
with the engine's own step (a `Run` on the reference path); the sites' contributions are protected on the
site (clipped under DP, masked under secure aggregation) and summed on a worker; the coordinator unmasks
the sum, adds DP noise, charges the privacy ledger and lets the strategy fold the sum into the next model.

Trust: `own` (your devices) may run in the clear; beyond it (`consortium`, `open`) differential privacy is
always engaged and a round without it is refused; `consortium` (cross-silo) also requires secure
aggregation. Byte-exclusion is not privacy: an update is a function of the data, so neither mode is
called private without DP. What travels follows pool/trust.py: beyond `own` only data (the spec text,
arrays, the strategy as a catalog name + content hash that each peer checks against its own catalog).
"""
from __future__ import annotations

import itertools
import secrets
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..catalog import get as catalog_get
from ..catalog.aggregations import Strategy
from ..errors import FederatedError, ModelVersionMismatch, ScellisError, SiteUnavailable, TrustRefused
from ..pool.job import content_hash
from ..pool.trust import a_regime
from . import site as site_mod
from .privacy import Privacy, PrivacyLedger, clip, gaussian_noise
from .vectors import flatten, layout, tree_map, tree_sum, unflatten

TRUST = ("own", "consortium", "open")
LOAD_TIMEOUT = 60.0          # seconds a site may take to load its partition (a round has its own timeout)


@dataclass
class RoundResult:
    """One round (or, for an asynchronous strategy, one server update): who answered, what it cost."""

    round: int
    version: int
    sites: list                       # sites whose contribution entered the aggregate
    dropped: list                     # sites that did not answer in time
    losses: dict                      # site -> its last local training loss
    epsilon: float | None = None      # total eps spent after this round (None without DP)
    seconds: float = 0.0
    staleness: list = field(default_factory=list)   # asynchronous: (site, version trained on, tau) per arrival
    metrics: dict = field(default_factory=dict)
    privacy_head: dict | None = None  # the privacy ledger's signer and head after this round (a kept ledger)


class Protect:
    """What a site applies to its vectors before they leave: weighting, DP clipping, secure-aggregation masks."""

    def __init__(self, weighting: str, clip_norm: float | None, secure: Any = None, site_noise: float = 0.0):
        self.weighting, self.clip_norm, self.secure, self.site_noise = weighting, clip_norm, secure, site_noise

    def __call__(self, out: dict, data: "site_mod.SiteData") -> dict:
        vectors = out.pop("vectors")
        lay = layout(vectors)
        vec = flatten(vectors)
        w = 1.0 if self.clip_norm is not None or self.weighting == "uniform" else float(out["n"])
        if self.clip_norm is not None:
            # under DP nothing data-dependent leaves but the clipped, noised-later vector: not the example
            # count, not the local loss, not the norm before clipping (none of them is accounted)
            vec, _ = clip(vec, self.clip_norm)
            if self.site_noise:           # distributed DP: this site's share of the round's Gaussian noise
                vec = vec + gaussian_noise(vec.size, self.site_noise)
            out.pop("n", None)
            out["loss"] = float("nan")
        vec = np.concatenate([vec * w, [w]])
        out["layout"] = lay
        if self.secure is not None:
            out["masked"] = self.secure.mask(vec, data)
        else:
            out["summand"] = vec
        out["digest"] = content_hash(out.get("masked", out.get("summand")))
        return out


def _sum(*outs: dict) -> np.ndarray:
    """Sum the sites' vectors on a worker (uint64 wraps: masked sums are mod 2^64)."""
    key = "masked" if "masked" in outs[0] else "summand"
    acc = np.array(outs[0][key], copy=True)
    for o in outs[1:]:
        acc += o[key]
    return acc


def _scaled_sum(scales: list, *outs: dict) -> np.ndarray:
    """sum_i scales[i] * summand_i on a worker (FedBuff's staleness-weighted buffer)."""
    acc = np.zeros_like(np.asarray(outs[0]["summand"], np.float64))
    for w, o in zip(scales, outs):
        acc += w * np.asarray(o["summand"], np.float64)
    return acc


def _meta(out: dict) -> dict:
    return {k: v for k, v in out.items() if k not in ("masked", "summand")}


class Federation:
    """`Federation(pool, spec, sites={"a": loader, ...}, strategy="fedavg")`, then `fit(rounds)`.

    `sites` maps a site name to its loader: a path of a `.npz` (arrays x, y) on that site's machine, a
    callable run there, or (x, y) arrays (scattered once, to that site's worker only). `strategy` is a
    catalog aggregation name, a `Strategy` instance, or a registered user entry; `params` its
    hyperparameters. `local_steps` optimizer steps per site per round
    (`batch_size`: the spec's, another, or "full" for a site's whole partition). `privacy` (a `Privacy`) engages DP;
    `secure=True` secure aggregation. `quorum` sites must answer within `timeout` seconds, else the round
    fails with SiteUnavailable; by default every site must. `privacy_ledger` (a path) keeps the budget
    spent; `privacy_key` (hex) pins its signer in the federation's configuration, and each round record keeps
    the ledger's head, so a dropped or rewritten line is refused when the ledger is reopened.
    """

    def __init__(self, pool, spec, sites: dict, *, strategy: "str | Strategy" = "fedavg", params: dict | None = None,
                 local_steps: int = 10, trust: str | None = None, privacy: Privacy | None = None,
                 privacy_ledger: "PrivacyLedger | str | None" = None, secure: bool | None = None,
                 quorum: int | None = None, timeout: float = 120.0, threshold: int | None = None, seed: int = 0,
                 batch_size: "int | str | None" = None, privacy_key: str | None = None):
        from ..spec import Spec
        self.pool, self.client = pool, pool.client
        if isinstance(spec, Spec):
            self.text = spec.text
        elif isinstance(spec, str) and ("\n" in spec or "=" in spec):
            self.text = spec
        else:
            from pathlib import Path
            self.text = Path(spec).read_text()
        self.trust = trust or getattr(pool, "trust", "own")
        if self.trust not in TRUST:
            raise FederatedError(f"unknown trust regime {self.trust!r}", where="Federation",
                                 hint=f"use one of {', '.join(TRUST)}")
        if self.trust != "own" and privacy is None:
            raise FederatedError(f"{a_regime(self.trust)} federation without differential privacy is refused: model "
                                 f"updates are functions of the sites' data", where="Federation(privacy=None)",
                                 hint="give privacy=Privacy(epsilon=..., delta=..., clip=..., noise_multiplier=...)")
        self.secure = (self.trust != "own") if secure is None else bool(secure)
        if self.trust == "consortium" and not self.secure:
            raise FederatedError("a consortium (cross-silo) federation without secure aggregation is refused",
                                 where="Federation(secure=False)", hint="leave secure on (the default beyond own)")
        if isinstance(strategy, str):
            self.strategy_name = strategy
            self.strategy = catalog_get("aggregation", strategy).make(**(params or {}))
        else:
            if params:
                raise FederatedError("params= goes with a strategy name, not an instance", where="Federation",
                                     hint="configure the instance itself")
            self.strategy_name, self.strategy = type(strategy).__name__, strategy
        for m in ("init", "local", "contribution", "aggregate"):
            if not callable(getattr(self.strategy, m, None)):
                raise FederatedError(f"strategy {self.strategy_name!r} has no {m}() method", where="Federation",
                                     hint="subclass scellis_jupyter.catalog.aggregations.Strategy")
        self._shipped = self._ship(strategy, params)
        if self.secure and getattr(self.strategy, "asynchronous", False):
            raise FederatedError(f"{self.strategy_name!r} is asynchronous; secure aggregation needs a round of "
                                 f"sites that mask together", where="Federation(secure=True)",
                                 hint="use a synchronous strategy, or secure=False on an own pool")
        if not sites:
            raise FederatedError("a federation needs at least one site", where="Federation(sites=...)",
                                 hint='give sites={"a": "a.npz", ...}')
        if self.trust != "own":
            for s, source in sites.items():
                if callable(source):
                    raise TrustRefused(f"only an own pool may ship Python callables; site {s!r}'s loader "
                                       f"{getattr(source, '__qualname__', type(source).__name__)} is one",
                                       where=f"Federation(trust={self.trust!r}, sites=...)",
                                       hint="give a path that site reads on its own machine, or use an own pool")
        self.privacy = privacy
        if privacy is not None:
            self.ledger = privacy_ledger if isinstance(privacy_ledger, PrivacyLedger) else \
                PrivacyLedger(privacy.epsilon, privacy.delta, privacy_ledger, public_key=privacy_key)
        else:
            self.ledger = None
        self.local_steps = int(local_steps)
        self.batch_size = batch_size
        self.timeout = float(timeout)
        self.seed = int(seed)
        self.id = uuid.uuid4().hex[:12]
        workers = pool.workers()
        if not workers:
            raise FederatedError("the pool has no workers to hold sites", where="Federation", hint="start workers")
        self.names = list(sites)
        self.where = {s: workers[i % len(workers)] for i, s in enumerate(self.names)}
        self.quorum = len(self.names) if quorum is None else int(quorum)
        if not 1 <= self.quorum <= len(self.names):
            raise FederatedError(f"quorum={quorum} is not between 1 and the {len(self.names)} sites",
                                 where="Federation(quorum=...)", hint="give the sites that must answer each round")
        self.threshold = threshold
        if self.secure and not self.quorum >= self._threshold() >= 1:
            raise FederatedError(f"secure aggregation needs {self._threshold()} sites to unmask a round, but the "
                                 f"quorum is {self.quorum} (of {len(self.names)} sites)", where="Federation",
                                 hint="raise quorum= to at least threshold=, or lower threshold= (more than "
                                      "half the sites keeps a lying server from unmasking one site)")
        self.info = self._load(sites)
        labels = [v for i in self.info.values() for v in (i["labels"] or [])]
        self.classes = (max(labels) + 1) if labels and all(i["labels"] is not None for i in self.info.values()) \
            else None
        self.weights = self._initial_weights()
        self.state = self.strategy.init(self.weights, len(self.names))
        self.version = 0
        self.rounds: list[RoundResult] = []
        self._round_no = itertools.count(1)
        self.listeners: list[Callable[[RoundResult], None]] = []
        # within a round: {"kind": "round_start", "round", "sites"} then {"kind": "site_done", "round",
        # "site", "status"} as each site's task ends (called in the thread running fit; keep them quick)
        self.progress: list[Callable[[dict], None]] = []

    def _ship(self, strategy, params) -> "bytes | dict":
        """How the strategy travels. `own`: cloudpickle bytes (a user's cell or instance runs as is).
        Beyond own (the POOLSAFE rule of pool/trust.py: a shard travels as data) only a catalog reference
        travels, {aggregation, hash, params}; the peer builds its own catalog entry and checks the hash."""
        if self.trust == "own":
            return _shipped(self.strategy)
        where = f"Federation(trust={self.trust!r}, strategy=...)"
        if not isinstance(strategy, str):
            raise TrustRefused(f"only an own pool may ship Python objects; the strategy "
                               f"{type(strategy).__qualname__} is one", where=where,
                               hint="name a catalog aggregation that every site holds (strategy='fedavg', "
                                    "params={...}), or use an own pool for a user-written strategy")
        entry = catalog_get("aggregation", strategy)
        ref = site_mod.strategy_ref(entry, params)
        if ref is None:
            raise TrustRefused(f"aggregation {strategy!r} comes from {entry.origin}, not a catalog file the "
                               f"sites can hold: only an own pool may ship it", where=where,
                               hint="save it under catalog/aggregations/ on every site (the same file), "
                                    "or use an own pool")
        from ..pool.trust import _plain
        _plain(ref["params"], "params", where)
        return ref

    # ---- sites -----------------------------------------------------------------------------------------
    def _key(self, s: str) -> str:
        return f"{self.id}/{s}"

    def _pinned(self, s: str, fn, *args, **kw):
        return self.client.submit(fn, *args, workers=[self.where[s]], allow_other_workers=False, pure=False,
                                  key=f"fed-{fn.__name__}-{s}-{uuid.uuid4().hex[:8]}", **kw)

    def _load(self, sites: dict) -> dict:
        futs = {}
        for s, source in sites.items():
            if isinstance(source, tuple) and len(source) == 2 and not callable(source):
                # given arrays: scattered once, to this site's worker only, and pinned there
                [source] = self.client.scatter([source], workers=[self.where[s]], broadcast=False, hash=False)
            futs[s] = self._pinned(s, site_mod.load, self._key(s), s, source)
        info = {}
        for s, f in futs.items():
            try:
                info[s] = f.result(timeout=max(self.timeout, LOAD_TIMEOUT))
            except ScellisError:
                raise
            except TimeoutError:
                raise SiteUnavailable(f"site {s!r} did not load its data within {max(self.timeout, LOAD_TIMEOUT):g} s",
                                      where=f"site {s!r}", hint="check that its worker is up") from None
        empty = [s for s, i in info.items() if i["n"] == 0]
        if empty:
            raise FederatedError(f"site {empty[0]!r} holds no examples", where=f"site {empty[0]!r}",
                                 code="federated-empty-site", sites=empty,
                                 hint="give it data, or leave it out of sites=")
        shapes = {tuple(i["shape"]) for i in info.values()}
        if len(shapes) > 1:
            raise FederatedError(f"the sites' examples have different shapes: {sorted(shapes)}", where="Federation",
                                 hint="every site must hold examples of the model's input shape")
        return info

    def _initial_weights(self) -> dict:
        s = self.names[0]

        return self._pinned(s, site_mod.initial_weights, self._key(s), self.text, self.classes).result()

    # ---- rounds ----------------------------------------------------------------------------------------
    def _protect(self, n: int) -> Protect:
        sec = self._secure_setup(n) if self.secure else None
        p = self.privacy
        # DP under secure aggregation: each site adds N(0, (z C)^2 / quorum), so any quorum of survivors
        # sums to at least the accounted noise and the coordinator never sees an un-noised sum
        noise = p.noise_multiplier * p.clip / np.sqrt(self.quorum) if (p is not None and sec is not None) else 0.0
        return Protect(self.strategy.weighting, p.clip if p else None, sec, noise)

    def _secure_setup(self, n: int):
        """Keys and encrypted shares for one round. A site silent here takes no part in the round (no one
        masks against it); the round still needs the threshold of sites to take part."""
        from .secagg import SecureRound, site_advertise, site_share
        t = self._threshold()
        rid = uuid.uuid4().hex
        pubs = self._answers({s: self._pinned(s, site_advertise, self._key(s), rid) for s in self.names})
        names = sorted(pubs)
        if len(names) < max(t, self.quorum):
            raise SiteUnavailable(f"round {n}: {len(names)} of {len(self.names)} sites answered the secure-"
                                  f"aggregation key exchange within {self.timeout:g} s, fewer than "
                                  f"{max(t, self.quorum)}", where=f"round {n}",
                                  hint="raise timeout, lower quorum=, or bring the silent sites' workers back")
        shares = self._answers({s: self._pinned(s, site_share, self._key(s), rid, pubs, t) for s in names})
        if len(shares) < len(names):
            raise SiteUnavailable(f"round {n}: site(s) {sorted(set(names) - set(shares))} did not send their "
                                  f"secret shares", where=f"round {n}", hint="retry the round")
        inbox: dict = {s: {} for s in names}
        for s, out in shares.items():
            for to, ct in out.items():
                inbox[to][s] = ct
        self._inbox = inbox
        return SecureRound(rid, names, pubs, t)

    def _threshold(self) -> int:
        return self.threshold or (len(self.names) // 2 + 1)

    def _answers(self, futs: dict) -> dict:
        """The results of the futures that finish within `timeout`; the rest are cancelled (silent)."""
        _wait(list(futs.values()), self.timeout)
        out = {}
        for s, f in futs.items():
            if f.status == "finished":
                out[s] = f.result()
            elif f.status == "error" and isinstance(f.exception(), ScellisError):
                raise f.exception()
            else:
                f.cancel()
        return out

    def fit(self, rounds: int, *, on_round: Callable[[RoundResult], None] | None = None,
            evaluate: Callable[[dict], dict] | None = None) -> list[RoundResult]:
        """Run `rounds` rounds (server updates, for an asynchronous strategy); `on_round` sees each result."""
        out = []
        if getattr(self.strategy, "asynchronous", False):
            gen = self._async(rounds)
        else:
            gen = (self.round() for _ in range(int(rounds)))
        for r in gen:
            if evaluate is not None:
                r.metrics = dict(evaluate(self.weights))
            for fn in self.listeners + ([on_round] if on_round else []):
                fn(r)
            out.append(r)
        return out

    def _progress(self, ev: dict) -> None:
        for fn in list(self.progress):
            try:
                fn(ev)
            except Exception:         # a view's failure must not stop a round
                pass

    def _preflight(self) -> None:
        if self.ledger is not None:
            self.ledger.check(self.privacy.noise_multiplier, f"round {len(self.rounds) + 1}")

    def round(self) -> RoundResult:
        """One synchronous round; SiteUnavailable if fewer than `quorum` sites answer within `timeout`."""
        self._preflight()
        t0 = time.perf_counter()
        n = next(self._round_no)
        protect = self._protect(n)
        taking_part = protect.secure.names if protect.secure is not None else self.names
        futs = {s: self._pinned(s, site_mod.round_update, self._key(s), s, self.text, self.weights, self.version,
                                self.local_steps, self._shipped, self.state, self._seed(n, s), protect,
                                self.batch_size, self.classes)
                for s in taking_part}
        self._progress({"kind": "round_start", "round": n, "sites": list(taking_part)})
        _wait(list(futs.values()), self.timeout,
              on_done=lambda i, fut: self._progress({"kind": "site_done", "round": n, "site": list(futs)[i],
                                                      "status": fut.status}))
        done, dropped = {}, [s for s in self.names if s not in taking_part]
        for s, f in futs.items():
            if f.status == "finished":
                done[s] = f
            elif f.status == "error":
                e = f.exception()
                if isinstance(e, ScellisError):
                    raise e
                if type(e).__name__ in ("KilledWorker", "CancelledError", "CommClosedError"):
                    dropped.append(s)             # its worker went away mid-round: silent, like a timeout
                    continue
                raise FederatedError(f"site {s!r} failed in round {n}: {type(e).__name__}: {e}", where=f"site {s!r}",
                                     hint="fix the strategy or the spec; the site's traceback is in its worker log")
            else:
                dropped.append(s)
                f.cancel()
        if len(done) < self.quorum:
            raise SiteUnavailable(f"round {n}: {len(done)} of {len(self.names)} sites answered within "
                                  f"{self.timeout:g} s, fewer than the quorum of {self.quorum} "
                                  f"(silent: {', '.join(dropped)})", where=f"round {n}", dropped=dropped,
                                  hint="raise timeout, lower quorum=, or bring the silent sites' workers back")
        metas = dict(zip(done, self.client.gather([self.client.submit(_meta, f, pure=False) for f in done.values()])))
        for s, m in metas.items():
            if m["version"] != self.version:
                raise ModelVersionMismatch(f"site {s!r} sent an update for model version {m['version']}, "
                                           f"but round {n} sent version {self.version}", where=f"site {s!r}",
                                           hint="a site answered from another round; restart it and retry the round")
        total = self.client.submit(_sum, *done.values(), pure=False).result()
        lay = metas[next(iter(metas))]["layout"]
        if protect.secure is not None:
            masked_but_silent = [s for s in dropped if s in protect.secure.names]
            total = self._unmask(protect.secure, total, list(done), masked_but_silent)
        agg = self._release(total, lay, len(done), f"round {n}", noised=protect.site_noise > 0)
        model = content_hash(self.weights)
        self.weights, self.state = self.strategy.aggregate(self.weights, agg, len(done), self.state)
        self.version += 1
        self._receipts(n, model, metas, "secure" if protect.secure is not None else "clear")
        r = RoundResult(n, self.version, sorted(done), sorted(dropped), {s: m["loss"] for s, m in metas.items()},
                        self.ledger.spent if self.ledger else None, time.perf_counter() - t0,
                        privacy_head=self.ledger.head() if self.ledger else None)
        self.rounds.append(r)
        return r

    def _unmask(self, sec, total, survivors, dropped):
        from .secagg import site_reveal
        reveal = {s: self._pinned(s, site_reveal, self._key(s), sec.rid, self._inbox[s], survivors, dropped)
                  for s in survivors}
        got = {}
        for s, f in reveal.items():
            try:
                got[s] = f.result(timeout=self.timeout)
            except TimeoutError:
                continue
        return sec.unmask(total, got, survivors, dropped)

    def _release(self, total: np.ndarray, lay, count: int, what: str, noised: bool = False) -> dict:
        """The sum made public: charged first (refused if over budget), DP noise added unless the sites
        already added it (`noised`), then unflattened."""
        total = np.asarray(total, np.float64)
        vec, weight = total[:-1], float(total[-1])
        if self.privacy is not None:
            self.ledger.charge(self.privacy.noise_multiplier, what)
            if not noised:
                vec = vec + gaussian_noise(vec.size, self.privacy.noise_multiplier * self.privacy.clip)
        agg = unflatten(vec, lay)
        agg["weight"] = np.float64(weight)
        return agg

    def _receipts(self, n: int, model: str, metas: dict, how: str) -> None:
        """One receipt per accepted site contribution in the pool's ledger (if it keeps one). Method
        `federated:<clear|secure>:unverified`: the coordinator cannot re-execute a site's steps without its
        rows, so, unlike a Job's shards, these results are accepted unchecked, and the receipt says so.
        Work units are the planner's FLOPs of the site's local step program times its steps."""
        if getattr(self.pool, "ledger", None) is None:
            return
        job = content_hash({"federation": self.id, "round": n, "model": model, "strategy": self.strategy_name})
        for s, m in sorted(metas.items()):
            self.pool.ledger.mint(job=job, shard=content_hash({"site": s, "data": self.info[s]["hash"]}),
                                  peer=self.where[s], result=m["digest"], method=f"federated:{how}:unverified",
                                  work_units=self._flops(s) * self.local_steps)

    def _flops(self, s: str) -> int:
        """FLOPs of one local step of site `s` (its batch), from the plan of the local spec on rows of its shape."""
        from ..plan import plan as make_plan
        from ..program.cost import program_flops
        from ..spec import Spec
        n = self.info[s]["n"]
        bs = n if self.batch_size == "full" else self.batch_size
        key = (bs, tuple(self.info[s]["shape"]))
        cache = self.__dict__.setdefault("_flop_cache", {})
        if key not in cache:
            import tomlkit
            rows = int(bs or tomlkit.parse(self.text).get("recipe", {}).get("batch_size", 32))
            x = np.zeros((rows,) + key[1], np.float32)
            y = np.zeros(rows, np.int64) if self.classes is not None else np.zeros((rows, 1), np.float32)
            spec = Spec.of(site_mod.local_spec(self.text, None, 0, bs), site_mod.memory(x, y, self.classes))
            cache[key] = int(program_flops(make_plan(spec, device="reference").step.program))
        return cache[key]

    def _seed(self, n: int, s: str) -> int:
        return int(content_hash({"seed": self.seed, "round": n, "site": s})[:8], 16)

    # ---- asynchronous (FedBuff) ---------------------------------------------------------------------------
    def _async(self, updates: int):
        """Sites train continuously; every `buffer` arrivals make one server update. Arrivals are taken
        in the order they finish; a site is sent the current model as soon as it reports."""
        k = int(getattr(self.strategy, "buffer", 0) or 1)
        protect = Protect(self.strategy.weighting, self.privacy.clip if self.privacy else None, None)
        n = itertools.count()

        def send(s):
            return self._pinned(s, site_mod.round_update, self._key(s), s, self.text, self.weights, self.version,
                                self.local_steps, self._shipped, self.state, self._seed(next(n), s), protect,
                                self.batch_size, self.classes)
        flying = [send(s) for s in self.names]
        buf, metas, t0, made = [], [], time.perf_counter(), 0
        self._preflight()
        try:
            while made < updates:
                deadline = time.monotonic() + self.timeout
                while not any(f.done() for f in flying):
                    if time.monotonic() > deadline:
                        raise SiteUnavailable(f"no site answered within {self.timeout:g} s in asynchronous "
                                              f"training", where="Federation",
                                              hint="raise timeout or bring the sites' workers back")
                    time.sleep(0.002)
                f = next(f for f in flying if f.done())
                flying.remove(f)
                out = self.client.submit(_meta, f, pure=False).result()      # metadata only: the vector stays
                s = out["site"]
                tau = self.version - out["version"]
                if tau < 0:
                    raise ModelVersionMismatch(f"site {s!r} sent an update for model version {out['version']}, "
                                               f"newer than the server's {self.version}", where=f"site {s!r}",
                                               hint="two servers are driving these sites; use one")
                buf.append((f, self.strategy.staleness_weight(tau)))
                metas.append((s, tau, out["loss"], out["layout"], out["version"]))
                if len(metas) == k:
                    rno = next(self._round_no)
                    total = self.client.submit(_scaled_sum, [w for _, w in buf], *[x for x, _ in buf],
                                               pure=False).result()             # summed on a worker
                    agg = self._release(total, metas[0][3], k, f"server update {rno}")
                    self.weights, self.state = self.strategy.aggregate(self.weights, agg, k, self.state)
                    self.version += 1
                    made += 1
                    r = RoundResult(rno, self.version, [m[0] for m in metas], [], {m[0]: m[2] for m in metas},
                                    self.ledger.spent if self.ledger else None, time.perf_counter() - t0,
                                    staleness=[(m[0], m[4], m[1]) for m in metas],
                                    privacy_head=self.ledger.head() if self.ledger else None)
                    self.rounds.append(r)
                    buf, metas, t0 = [], [], time.perf_counter()
                    yield r
                    if made < updates:
                        self._preflight()
                if made < updates:
                    flying.append(send(s))
        finally:
            for f in flying:
                f.cancel()

    # ---- the model -------------------------------------------------------------------------------------
    def predict(self, x: np.ndarray, weights: dict | None = None) -> np.ndarray:
        """The server model's outputs on `x` (the coordinator's own held-out data), on the reference path."""
        from ..run.run import Run
        x = np.asarray(x)
        y0 = np.zeros(len(x), np.int64)                       # labels are not read: predict only
        run = Run(site_mod.local_spec(self.text, None, 0), device="reference", steps=1,
                  data=site_mod.memory(x, y0, self.classes),
                  weights={k: np.asarray(v, np.float32) for k, v in (weights or self.weights).items()})
        return np.asarray(run.predict(x))

    def accuracy(self, x: np.ndarray, y: np.ndarray, weights: dict | None = None) -> float:
        return float(np.mean(self.predict(x, weights).argmax(axis=1) == np.asarray(y)))

    def close(self) -> None:
        """Forget the sites' rows on their workers."""
        for s in self.names:
            try:
                self._pinned(s, site_mod.forget, self._key(s)).result(timeout=5)
            except Exception:       # a worker already gone holds nothing
                pass

    def __enter__(self) -> "Federation":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Federation({self.strategy_name}, sites={len(self.names)}, trust={self.trust}, "
                f"dp={'on' if self.privacy else 'off'}, secure={'on' if self.secure else 'off'}, "
                f"version={self.version})")


def _wait(futures: list, timeout: float, on_done: Callable[[int, Any], None] | None = None) -> None:
    """Until every future is done or `timeout` seconds have passed (what did not finish is then silent);
    `on_done(i, future)` once per future as it is first seen done, in this thread."""
    deadline = time.monotonic() + timeout
    seen: set[int] = set()
    while True:
        for i, f in enumerate(futures):
            if i not in seen and f.done():
                seen.add(i)
                if on_done is not None:
                    on_done(i, f)
        if len(seen) == len(futures) or time.monotonic() >= deadline:
            return
        time.sleep(0.005)


def _shipped(strategy: Any) -> bytes:
    """The strategy as cloudpickle bytes, its catalog module by value: entry modules (scellis_catalog.*, a
    user's cell) exist only where the catalog was loaded, and Dask tries plain pickle (by reference) first."""
    import cloudpickle          # dask's own pickler
    mod = sys.modules.get(type(strategy).__module__)
    if mod is not None and mod.__name__.startswith("scellis_catalog"):
        try:
            cloudpickle.register_pickle_by_value(mod)
        except (ValueError, TypeError):
            pass
    return cloudpickle.dumps(strategy)
