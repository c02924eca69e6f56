"""Secure aggregation (after Bonawitz et al. 2017, "Practical Secure Aggregation for Privacy-Preserving
Machine Learning"): the server learns the SUM of the sites' vectors and nothing else about any one of them,
and the sum survives sites that drop out mid-round.

What it does and does not do: it hides each individual update from the server and from the other sites;
it RELEASES THE AGGREGATE, which is still a function of every site's data. It is no substitute for
differential privacy: use both (a consortium federation does).

How: each site holds two fresh X25519 key pairs per round (one to agree pairwise masks, one to encrypt
shares) and a fresh 32-byte self-mask seed b. Its vector is quantized to fixed point (2^-24 steps) in the
ring Z / 2^64 and sent as
    y_i = q(x_i) + PRG(b_i) + sum_{j > i} PRG(s_ij) - sum_{j < i} PRG(s_ij)      (mod 2^64)
where s_ij = HKDF(X25519(s_i, S_j)) is the same for i and j, so pairwise masks cancel in the sum. PRG is
the ChaCha20 keystream (`cryptography`), never a seeded numpy generator. Before masking, each site splits
b_i and its mask private key s_i into t-of-n Shamir shares over the prime field GF(2^521 - 1) (our own:
pycryptodome's Shamir takes 16-byte secrets, ours are 32 bytes) and sends share j to site j encrypted and
authenticated with AES-GCM under HKDF(X25519(c_i, C_j)), the round, sender and receiver bound as
associated data. After the masked vectors are in, each surviving site reveals, for every other site,
either its share of b (the sender survived) or of s (the sender dropped), never both: the server then
removes the survivors' self-masks and recomputes the dropped sites' pairwise masks. Needs at least t
survivors; fewer is a SecureAggregationError.
"""
from __future__ import annotations

import json
import secrets
from dataclasses import dataclass

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ..errors import SecureAggregationError

PRIME = 2 ** 521 - 1            # a Mersenne prime: field of the Shamir shares (secrets are 256-bit)
FRACTION_BITS = 24              # fixed point: x is sent as round(x * 2^24) in Z / 2^64
_RAW = (serialization.Encoding.Raw, serialization.PublicFormat.Raw)


# ---- fixed point ------------------------------------------------------------------------------------------
def quantize(vec: np.ndarray, sites: int) -> np.ndarray:
    """round(vec * 2^24) as uint64 (two's complement); refuses values whose sum over `sites` could wrap."""
    vec = np.asarray(vec, np.float64)
    limit = 2.0 ** (62 - FRACTION_BITS) / max(1, sites)
    if vec.size and not (np.all(np.isfinite(vec)) and float(np.max(np.abs(vec))) < limit):
        raise SecureAggregationError(f"a value of magnitude {float(np.max(np.abs(vec))):.3g} does not fit the "
                                     f"fixed-point range +-{limit:.3g} for {sites} sites", where="secure aggregation",
                                     hint="clip the updates (privacy=Privacy(clip=...)) or lower the learning rate")
    return np.rint(vec * 2.0 ** FRACTION_BITS).astype(np.int64).view(np.uint64)


def dequantize(u: np.ndarray) -> np.ndarray:
    return np.asarray(u, np.uint64).view(np.int64).astype(np.float64) / 2.0 ** FRACTION_BITS


def prg(seed: bytes, n: int) -> np.ndarray:
    """n uint64 words of the ChaCha20 keystream under the 32-byte `seed` (a fresh key per round and pair)."""
    enc = Cipher(algorithms.ChaCha20(seed, b"\0" * 16), mode=None).encryptor()
    return np.frombuffer(enc.update(b"\0" * (8 * n)), dtype="<u8").astype(np.uint64)


def _kdf(shared: bytes, info: str) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info.encode()).derive(shared)


def pair_seed(private: X25519PrivateKey, other_public: bytes, rid: str, a: str, b: str) -> bytes:
    lo, hi = sorted((a, b))
    return _kdf(private.exchange(X25519PublicKey.from_public_bytes(other_public)), f"scellis-secagg-mask|{rid}|{lo}|{hi}")


# ---- Shamir over GF(2^521 - 1) --------------------------------------------------------------------------
def shamir_split(secret: bytes, n: int, t: int) -> list[tuple[int, int]]:
    """t-of-n shares (x, f(x)) of the 32-byte secret f(0), coefficients from the CSPRNG."""
    if not 1 <= t <= n:
        raise SecureAggregationError(f"threshold {t} is not between 1 and {n} sites", where="secure aggregation",
                                     hint="give threshold= a number of sites that will surely survive")
    coef = [int.from_bytes(secret, "big")] + [secrets.randbelow(PRIME) for _ in range(t - 1)]
    out = []
    for x in range(1, n + 1):
        y = 0
        for c in reversed(coef):
            y = (y * x + c) % PRIME
        out.append((x, y))
    return out


def shamir_combine(shares: list[tuple[int, int]]) -> bytes:
    """f(0) by Lagrange interpolation from t (or more) distinct shares."""
    s = 0
    for i, (xi, yi) in enumerate(shares):
        num, den = 1, 1
        for j, (xj, _) in enumerate(shares):
            if i != j:
                num = num * (-xj) % PRIME
                den = den * (xi - xj) % PRIME
        s = (s + yi * num * pow(den, -1, PRIME)) % PRIME
    if s >= 1 << 256:
        raise SecureAggregationError("the shares do not reconstruct a 256-bit secret", where="secure aggregation",
                                     hint="a share was altered, or fewer than the threshold were combined")
    return s.to_bytes(32, "big")


# ---- the site's side ---------------------------------------------------------------------------------------
def _state(data, rid: str) -> dict:
    try:
        return data.extra["secagg"][rid]
    except KeyError:
        raise SecureAggregationError(f"this site holds no keys for round {rid[:8]}", where="secure aggregation",
                                     hint="the site restarted mid-round; it counts as dropped") from None


def advertise(data, rid: str) -> dict:
    """Fresh keys and self-mask seed for round `rid`; returns the two public keys (bytes)."""
    c, s = X25519PrivateKey.generate(), X25519PrivateKey.generate()
    data.extra.setdefault("secagg", {})[rid] = {"c": c, "s": s, "b": secrets.token_bytes(32), "sent": False}
    return {"c": c.public_key().public_bytes(*_RAW), "s": s.public_key().public_bytes(*_RAW)}


def _box(data, rid: str, me: str, other: str, pubs: dict) -> AESGCM:
    st = _state(data, rid)
    return AESGCM(_kdf(st["c"].exchange(X25519PublicKey.from_public_bytes(pubs[other]["c"])),
                       f"scellis-secagg-share|{rid}"))


def share(data, rid: str, me: str, pubs: dict, t: int) -> dict:
    """This site's t-of-n shares of b and of its mask private key, one AES-GCM ciphertext per site."""
    st = _state(data, rid)
    names = sorted(pubs)
    st["pubs"], st["t"], st["me"] = pubs, t, me
    sk = st["s"].private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                               serialization.NoEncryption())
    bs, ss = shamir_split(st["b"], len(names), t), shamir_split(sk, len(names), t)
    out = {}
    for (name, b_sh, s_sh) in zip(names, bs, ss):
        body = json.dumps({"b": [b_sh[0], hex(b_sh[1])], "s": [s_sh[0], hex(s_sh[1])]}).encode()
        nonce = secrets.token_bytes(12)
        out[name] = nonce + _box(data, rid, me, name, pubs).encrypt(nonce, body, f"{rid}|{me}|{name}".encode())
    return out


@dataclass
class SecureRound:
    """The public side of one round: its id, the sites in order, their public keys, the threshold."""

    rid: str
    names: list
    pubs: dict
    t: int

    def mask(self, vec: np.ndarray, data) -> np.ndarray:
        """On the site: its quantized vector plus its self mask and pairwise masks (mod 2^64)."""
        st = _state(data, self.rid)
        me = st["me"]
        y = quantize(vec, len(self.names)) + prg(st["b"], len(vec))
        for other in self.names:
            if other == me:
                continue
            p = prg(pair_seed(st["s"], self.pubs[other]["s"], self.rid, me, other), len(vec))
            y = y + p if me < other else y - p
        st["sent"] = True
        return y

    def unmask(self, total: np.ndarray, revealed: dict, survivors: list, dropped: list) -> np.ndarray:
        """On the server: the sum of the survivors' vectors from their masked sum and the revealed shares."""
        if len(revealed) < self.t:
            raise SecureAggregationError(f"{len(revealed)} sites revealed shares, fewer than the threshold "
                                         f"{self.t}: the aggregate cannot be unmasked", where="secure aggregation",
                                         hint="more sites must survive the round (or lower threshold=)")
        n = len(total)
        acc = np.asarray(total, np.uint64).copy()
        helpers = sorted(revealed)[: self.t]
        for u in survivors:
            b = shamir_combine([revealed[v][u]["b"] for v in helpers])
            acc = acc - prg(b, n)
        for d in dropped:
            sk = X25519PrivateKey.from_private_bytes(shamir_combine([revealed[v][d]["s"] for v in helpers]))
            if sk.public_key().public_bytes(*_RAW) != self.pubs[d]["s"]:
                raise SecureAggregationError(f"the reconstructed key of dropped site {d!r} does not match its "
                                             f"public key", where="secure aggregation",
                                             hint="a revealed share was altered")
            for u in survivors:
                p = prg(pair_seed(sk, self.pubs[u]["s"], self.rid, d, u), n)
                acc = acc - p if u < d else acc + p       # u added +p for d > u, -p for d < u
        return dequantize(acc)


def reveal(data, rid: str, inbox: dict, survivors: list, dropped: list) -> dict:
    """On a surviving site: for each sender, its share of b (it survived) or of s (it dropped), never both."""
    st = _state(data, rid)
    me = st["me"]
    if set(survivors) & set(dropped):
        raise SecureAggregationError("the server asked for both shares of one site", where=f"site {me!r}",
                                     hint="a site is a survivor or dropped, not both")
    if me in dropped:
        raise SecureAggregationError(f"site {me!r} is listed as dropped but it is answering", where=f"site {me!r}",
                                     hint="its masked vector arrived late; this round cannot use it")
    out = {}
    for sender, ct in inbox.items():
        if sender not in survivors and sender not in dropped:
            continue
        try:
            body = json.loads(_box(data, rid, me, sender, st["pubs"]).decrypt(
                ct[:12], ct[12:], f"{rid}|{sender}|{me}".encode()))
        except InvalidTag:
            raise SecureAggregationError(f"the share from site {sender!r} fails authentication",
                                         where=f"site {me!r}", hint="it was altered in transit") from None
        which = "b" if sender in survivors else "s"
        x, y = body[which]
        out[sender] = {which: (int(x), int(y, 16))}
    del data.extra["secagg"][rid]                  # this round's keys are spent
    return out


# ---- Dask tasks (run on the site's worker) -----------------------------------------------------------
def site_advertise(key: str, rid: str) -> dict:
    from .site import held
    return advertise(held(key), rid)


def site_share(key: str, rid: str, pubs: dict, t: int) -> dict:
    from .site import held
    me = key.split("/", 1)[1]
    return share(held(key), rid, me, pubs, t)


def site_reveal(key: str, rid: str, inbox: dict, survivors: list, dropped: list) -> dict:
    from .site import held
    return reveal(held(key), rid, inbox, survivors, dropped)
