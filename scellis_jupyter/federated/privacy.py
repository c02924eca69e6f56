"""Differential privacy for federated rounds: per-site clipping, calibrated Gaussian noise on the sum, and a
privacy-budget ledger that only grows and refuses a round that would overspend the declared (eps, delta).

What is protected: one site's whole contribution to a round (add/remove-one-site adjacency). Each site's
vector is clipped to L2 norm `clip` and counted with weight 1, so adding or removing a site moves the sum
by at most `clip`; the server adds N(0, (noise_multiplier * clip)^2) to every coordinate of the sum before
anyone sees it: a Gaussian mechanism per round, all sites taking part (no subsampling amplification is
claimed). The count of reporting sites is treated as public. The accounting is Google's `dp-accounting`
(its RDP accountant, composing one Gaussian event per round). In the clear the guarantee is central DP:
it trusts the coordinator to add the noise. Under secure aggregation the noise is distributed: each site
adds N(0, (noise_multiplier * clip)^2 / quorum) before masking, so the sum of any quorum of survivors
carries at least the accounted noise and the coordinator never sees an un-noised sum. Noise is drawn from a generator seeded from the OS CSPRNG (`secrets`), never
from a fixed seed.
"""
from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import blake3
import numpy as np
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ..errors import FederatedError, LedgerError, PrivacyBudgetExceeded
from ..pool import keys


@dataclass(frozen=True)
class Privacy:
    """A declared budget (epsilon, delta) and the mechanism's clip norm and noise multiplier (sigma / clip)."""

    epsilon: float
    delta: float
    clip: float = 1.0
    noise_multiplier: float = 1.0

    def __post_init__(self):
        for k, lo in (("epsilon", 0.0), ("clip", 0.0), ("noise_multiplier", 0.0)):
            v = getattr(self, k)
            if not (isinstance(v, (int, float)) and v > lo and np.isfinite(v)):
                raise FederatedError(f"privacy {k}={v!r} must be a finite number > {lo:g}", where="Privacy",
                                     hint="e.g. Privacy(epsilon=8.0, delta=1e-5, clip=1.0, noise_multiplier=1.0)")
        if not 0.0 < self.delta < 1.0:
            raise FederatedError(f"privacy delta={self.delta!r} must be in (0, 1)", where="Privacy",
                                 hint="pick delta well below 1 / (number of sites), e.g. 1e-5")


def clip(vec: np.ndarray, norm: float) -> tuple[np.ndarray, float]:
    """vec scaled to L2 norm at most `norm` (as DP-FedAvg clips a site's update), and its norm before."""
    n = float(np.linalg.norm(vec))
    return (vec * min(1.0, norm / n) if n > 0 else vec), n


def gaussian_noise(size: int, std: float) -> np.ndarray:
    """N(0, std^2) noise, size draws, from a generator keyed by 128 bits of the OS CSPRNG."""
    return np.random.Generator(np.random.PCG64(secrets.randbits(128))).normal(0.0, std, size)


def epsilon_of(noise_multipliers: list[float], delta: float) -> float:
    """eps at `delta` after one Gaussian mechanism per entry (RDP accountant of dp-accounting)."""
    from dp_accounting import dp_event, rdp       # dp-accounting: only when a budget is accounted
    acc = rdp.RdpAccountant()
    for z in noise_multipliers:
        acc.compose(dp_event.GaussianDpEvent(float(z)))
    return float(acc.get_epsilon(float(delta))) if noise_multipliers else 0.0


GENESIS = "0" * 64
_BODY = ("seq", "what", "noise_multiplier", "delta", "epsilon", "prev", "signer")


def entry_hash(e: dict) -> str:
    """BLAKE3 of an entry's canonical body (everything but its hash and signature)."""
    return blake3.blake3(json.dumps({k: e[k] for k in _BODY}, sort_keys=True, separators=(",", ":")).encode()
                         ).hexdigest()


class PrivacyLedger:
    """The (eps, delta) spent so far against a declared budget; entries are only ever appended.

    `path` (optional) keeps the entries as JSON lines, appended and fsynced; reopening replays them, so a
    budget spent in an earlier session stays spent. Why a chain, a signer and a pin: a line dropped or a
    multiplier rewritten would refund the budget. Each line names the previous line's hash and is signed
    with the user's key (`key`, default the key store's `federation` key); the signer's public key and the
    head (count, last hash) are pinned in the key store, and `public_key` or `heads` (from a federation's
    round records) pin them where the trust decision lives. eps is recomputed from the recorded noise
    multipliers on every open; the eps a line records is only checked against it.
    """

    def __init__(self, epsilon: float, delta: float, path: str | os.PathLike | None = None, *,
                 key: Ed25519PrivateKey | None = None, public_key: str | None = None, heads: tuple | list = ()):
        self.epsilon, self.delta = float(epsilon), float(delta)
        self.path = Path(path) if path is not None else None
        self._key = key
        self.entries: list[dict] = []
        if self.path is None:
            return
        where = str(self.path)
        pin = keys.read_pin(self.path)
        expected = public_key or (pin["public_key"] if pin else keys.public_hex(self.key))
        if pin is not None and pin["public_key"] != expected:
            pin = None                                 # a named signer overrides this machine's pin and its head
        self._signer = expected
        lines = self.path.read_text().splitlines() if self.path.exists() else []
        prev, last, hashes = GENESIS, 0.0, []
        pub = Ed25519PublicKey.from_public_bytes(bytes.fromhex(expected))
        for i, line in enumerate(lines, start=1):
            try:
                e = json.loads(line)
                z, eps = float(e["noise_multiplier"]), float(e["epsilon"])
                h, sig, seq = str(e["hash"]), bytes.fromhex(e["signature"]), e["seq"]
                body_ok = entry_hash(e) == h
            except (ValueError, KeyError, TypeError):
                raise FederatedError(f"privacy ledger line {i} is not readable", where=where,
                                     hint="the ledger was edited; a spent budget cannot be restored") from None
            if not body_ok:
                raise FederatedError(f"privacy ledger line {i} does not match its hash: it was edited", where=where,
                                     hint="a spent budget cannot be restored; restore the ledger from a copy")
            if seq != i or e["prev"] != prev:
                raise FederatedError(f"privacy ledger line {i} does not chain to line {i - 1} "
                                     "(deleted, inserted or reordered)", where=where,
                                     hint="restore the ledger from a copy")
            if e["signer"] != expected:
                raise FederatedError(f"privacy ledger line {i} is signed by key {e['signer']}, expected {expected}",
                                     where=where, hint="a privacy ledger signed by any other key is refused")
            try:
                pub.verify(sig, h.encode())
            except InvalidSignature:
                raise FederatedError(f"privacy ledger line {i}'s signature does not verify", where=where,
                                     hint="the line was re-made without the federation's key") from None
            if float(e["delta"]) != self.delta or not (z > 0 and np.isfinite(z)):
                raise FederatedError(f"privacy ledger line {i} records delta={e['delta']}, noise_multiplier={z} "
                                     f"for a budget at delta={self.delta:g}", where=where,
                                     hint="open the ledger with the budget it was spent against")
            if eps + 1e-9 < last:
                raise FederatedError(f"privacy ledger line {i} spends less than line {i - 1}: it was edited",
                                     where=where, hint="a privacy ledger only grows")
            self.entries.append(e)
            prev, last = h, eps
            hashes.append(h)
        try:
            keys.check_head(where, pin, hashes, "rounds")
            for hd in heads:
                keys.check_head(where, {"count": int(hd["count"]), "head": str(hd["head"])}, hashes, "rounds",
                                kept="a round record")
        except LedgerError as e:
            raise FederatedError(e.diagnostic.message, where=where, hint=e.diagnostic.hint) from None
        if self.entries and abs(self.spent - last) > 1e-6 * max(1.0, last):
            raise FederatedError("the privacy ledger's recorded epsilon does not match its own events",
                                 where=where, hint="the ledger was edited")

    @property
    def key(self) -> Ed25519PrivateKey:
        if self._key is None:
            keys.check_outside(self.path)
            self._key = keys.signing_key("federation")
        return self._key

    def head(self) -> dict | None:
        """The signer and chain head, as a federation's round records keep them (None for an in-memory ledger)."""
        if self.path is None:
            return None
        return {"public_key": self._signer, "count": len(self.entries),
                "head": self.entries[-1]["hash"] if self.entries else GENESIS}

    @property
    def noise_multipliers(self) -> list[float]:
        return [float(e["noise_multiplier"]) for e in self.entries]

    @property
    def spent(self) -> float:
        """eps spent so far at this ledger's delta."""
        return epsilon_of(self.noise_multipliers, self.delta)

    def preview(self, noise_multiplier: float, rounds: int = 1) -> float:
        """eps after `rounds` more rounds at this noise multiplier (nothing is recorded)."""
        return epsilon_of(self.noise_multipliers + [float(noise_multiplier)] * int(rounds), self.delta)

    def check(self, noise_multiplier: float, what: str = "the next round") -> float:
        """The eps `what` would bring the total to; PrivacyBudgetExceeded if that overspends the budget."""
        after = self.preview(noise_multiplier)
        if after > self.epsilon:
            spent = self.spent
            raise PrivacyBudgetExceeded(
                f"{what} would spend eps to {after:.3f} > the declared budget eps={self.epsilon:g} "
                f"(delta={self.delta:g}); {spent:.3f} already spent in {len(self.entries)} round(s)",
                where="privacy ledger", spent=spent, budget=self.epsilon,
                hint="stop here, or declare a new budget for new data; a larger noise_multiplier spends less per round")
        return after

    def charge(self, noise_multiplier: float, what: str = "round") -> dict:
        """Record one Gaussian-mechanism round (refused, unrecorded, if it would overspend)."""
        after = self.check(noise_multiplier, what)
        e = {"what": what, "noise_multiplier": float(noise_multiplier), "epsilon": after, "delta": self.delta}
        if self.path is not None:
            mine = keys.public_hex(self.key)
            if mine != self._signer:
                raise FederatedError(f"this privacy ledger is signed by key {self._signer}, not by yours ({mine})",
                                     where=str(self.path), hint="charge it with the key that made it")
            e.update(seq=len(self.entries) + 1, prev=self.entries[-1]["hash"] if self.entries else GENESIS,
                     signer=mine)
            e["hash"] = entry_hash(e)
            e["signature"] = self.key.sign(e["hash"].encode()).hex()
            with open(self.path, "a") as f:
                f.write(json.dumps(e, sort_keys=True) + "\n")
                f.flush()
                os.fsync(f.fileno())
            keys.write_pin(self.path, mine, e["seq"], e["hash"])
        self.entries.append(e)
        return e

    def __repr__(self) -> str:
        return (f"PrivacyLedger(spent eps={self.spent:.3f} of {self.epsilon:g} at delta={self.delta:g}, "
                f"rounds={len(self.entries)})")
