"""Secure aggregation: the masked sum is the plain sum (within fixed point), one masked vector alone looks
uniform, a dropped site's masks are recovered from the survivors' shares, and tampering is caught."""
from __future__ import annotations

import time

import numpy as np
import pytest
from scipy import stats

import scellis_jupyter as sc
from scellis_jupyter.federated import Federation, secagg
from scellis_jupyter.federated.site import SiteData
from scellis_jupyter.pool import Pool

from fixtures import spec_text

NAMES = ["a", "b", "c", "d"]
Q = 2.0 ** -secagg.FRACTION_BITS


def setup_round(names=NAMES, t=3):
    sites = {s: SiteData(np.zeros((1, 1)), np.zeros(1)) for s in names}
    rid = "r1"
    pubs = {s: secagg.advertise(d, rid) for s, d in sites.items()}
    inbox = {s: {} for s in names}
    for s, d in sites.items():
        for to, ct in secagg.share(d, rid, s, pubs, t).items():
            inbox[to][s] = ct
    return sites, secagg.SecureRound(rid, list(names), pubs, t), inbox


def test_masked_sum_equals_plain_sum_within_quantization():
    rng = np.random.default_rng(0)
    sites, sec, inbox = setup_round()
    x = {s: rng.standard_normal(1000) * 10 for s in NAMES}
    masked = [sec.mask(x[s], sites[s]) for s in NAMES]
    total = masked[0].copy()
    for m in masked[1:]:
        total += m
    revealed = {s: secagg.reveal(sites[s], sec.rid, inbox[s], NAMES, []) for s in NAMES}
    got = sec.unmask(total, revealed, NAMES, [])
    plain = np.sum([x[s] for s in NAMES], axis=0)
    # each site's rounding is at most half a step: the sum is within n/2 steps
    assert np.max(np.abs(got - plain)) <= len(NAMES) * Q / 2
    assert np.max(np.abs(got - plain)) > 0                 # it really went through fixed point


def test_one_masked_vector_alone_is_indistinguishable_from_uniform():
    sites, sec, _ = setup_round()
    plain = np.zeros(20000)                                  # maximally non-uniform input
    plain[::2] = 3.0
    y = sec.mask(plain, sites["a"])
    u = (y >> np.uint64(11)).astype(np.float64) / 2.0 ** 53   # top 53 bits as a number in [0, 1)
    # Kolmogorov-Smirnov against U(0, 1): a truly uniform vector fails at alpha = 1e-4 one time in 10^4
    assert stats.kstest(u, "uniform").pvalue > 1e-4
    counts = np.bincount((y >> np.uint64(56)).astype(np.int64), minlength=256)     # top byte: 256 bins
    assert stats.chisquare(counts).pvalue > 1e-4
    # positive control: the unmasked fixed-point vector fails the same test decisively
    q = secagg.quantize(plain, 4)
    assert stats.kstest((q >> np.uint64(11)).astype(np.float64) / 2.0 ** 53, "uniform").pvalue < 1e-12


def test_a_dropped_sites_masks_are_recovered():
    rng = np.random.default_rng(1)
    sites, sec, inbox = setup_round()
    x = {s: rng.standard_normal(257) for s in NAMES}
    survivors, dropped = ["a", "b", "d"], ["c"]                # c shared its keys, then never sent its vector
    total = sum((sec.mask(x[s], sites[s]) for s in survivors[1:]), sec.mask(x["a"], sites["a"]))
    revealed = {s: secagg.reveal(sites[s], sec.rid, inbox[s], survivors, dropped) for s in survivors}
    assert all(set(revealed[s]["c"]) == {"s"} and set(revealed[s]["a"]) == {"b"} for s in survivors)
    got = sec.unmask(total, revealed, survivors, dropped)
    np.testing.assert_allclose(got, sum(x[s] for s in survivors), rtol=0, atol=len(survivors) * Q / 2)


def test_too_few_survivors_and_tampered_shares_are_refused():
    sites, sec, inbox = setup_round(t=3)
    with pytest.raises(sc.SecureAggregationError, match="fewer than the threshold 3"):
        sec.unmask(np.zeros(4, np.uint64), {"a": {}, "b": {}}, ["a", "b"], ["c", "d"])
    bad = dict(inbox["a"])
    ct = bytearray(bad["b"])
    ct[20] ^= 1
    bad["b"] = bytes(ct)
    with pytest.raises(sc.SecureAggregationError, match="fails authentication") as e:
        secagg.reveal(sites["a"], sec.rid, bad, NAMES, [])
    assert e.value.diagnostic.code == "secagg"
    with pytest.raises(sc.SecureAggregationError, match="both shares"):
        secagg.reveal(sites["b"], sec.rid, inbox["b"], ["a", "c"], ["c"])


def test_shamir_threshold():
    s = bytes(range(32))
    shares = secagg.shamir_split(s, 5, 3)
    assert secagg.shamir_combine(shares[:3]) == s and secagg.shamir_combine(shares[2:]) == s
    # below the threshold the interpolated value is uniform in the 521-bit field: it is a 256-bit secret
    # with probability 2^-265, so it is refused
    with pytest.raises(sc.SecureAggregationError, match="do not reconstruct"):
        secagg.shamir_combine(shares[:2])


def test_masks_come_from_chacha20():
    # counter 0, all-zero key and nonce: the first keystream block of RFC 8439 appendix A.1, test vector #1
    ks = secagg.prg(bytes(32), 8).view(np.uint8).tobytes()
    assert ks.hex().startswith("76b8e0ada0f13d90405d6ae55386bd28bdd219b8a08ded1aa836efcc8b770dc7")


# ---- on the Pool -----------------------------------------------------------------------------------------
SPEC = spec_text("fed_linear", name="fed-secure")


def sites3():
    rng = np.random.default_rng(2)
    return {f"s{i}": (rng.standard_normal((8, 3)).astype(np.float32), rng.standard_normal((8, 2)).astype(np.float32))
            for i in range(3)}


def test_secure_round_on_the_pool_matches_the_clear_round_and_survives_a_silent_site(monkeypatch):
    from scellis_jupyter.federated import site as site_mod
    data = sites3()
    with Pool(workers=3, processes=False) as pool:
        clear = Federation(pool, SPEC, data, batch_size="full", local_steps=2)
        secure = Federation(pool, SPEC, data, batch_size="full", local_steps=2, secure=True)
        assert secure.weights.keys() == clear.weights.keys()
        secure.weights = dict(clear.weights)
        w0 = dict(clear.weights)
        clear.fit(1)
        secure.fit(1)
        for k in w0:          # FedAvg sums n * delta: up to 3 sites x half a 2^-24 step, over n = 24
            np.testing.assert_allclose(secure.weights[k], clear.weights[k], rtol=0, atol=3 * Q / 2 / 24 + 1e-12)
        # now s2 never answers its round: the others' masks cancel, s2's pairwise masks are recomputed
        real = site_mod.round_update

        def silent(key, site, *a, **kw):
            if site == "s2":
                time.sleep(4.0)
            return real(key, site, *a, **kw)
        monkeypatch.setattr(site_mod, "round_update", silent)
        tolerant = Federation(pool, SPEC, data, batch_size="full", local_steps=2, secure=True, quorum=2,
                              timeout=1.5, threshold=2)
        only2 = Federation(pool, SPEC, {k: data[k] for k in ("s0", "s1")}, batch_size="full", local_steps=2)
        tolerant.weights = dict(w0)
        only2.weights = dict(w0)
        r = tolerant.fit(1)[0]
        only2.fit(1)
        assert r.dropped == ["s2"] and r.sites == ["s0", "s1"]
        for k in w0:
            np.testing.assert_allclose(tolerant.weights[k], only2.weights[k], rtol=0, atol=2 * Q / 2 / 16 + 1e-12)


def test_a_site_silent_at_the_key_exchange_sits_the_round_out(monkeypatch):
    data = sites3()
    real = secagg.site_advertise

    def slow(key, rid):
        if key.endswith("/s2"):
            time.sleep(3.0)
        return real(key, rid)
    monkeypatch.setattr(secagg, "site_advertise", slow)
    with Pool(workers=3, processes=False) as pool:
        f = Federation(pool, SPEC, data, batch_size="full", local_steps=2, secure=True, quorum=2, timeout=1.5)
        two = Federation(pool, SPEC, {k: data[k] for k in ("s0", "s1")}, batch_size="full", local_steps=2)
        two.weights = dict(f.weights)
        r = f.fit(1)[0]
        two.fit(1)
        assert r.sites == ["s0", "s1"] and r.dropped == ["s2"]
        for k in f.weights:
            np.testing.assert_allclose(f.weights[k], two.weights[k], rtol=0, atol=2 * Q / 2 / 16 + 1e-12)
        with pytest.raises(sc.FederatedError, match="needs 2 sites to unmask a round, but the quorum is 1"):
            Federation(pool, SPEC, data, secure=True, quorum=1)
